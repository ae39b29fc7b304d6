import LedgerStore
import Foundation
import Synchronization
import LMDBKit
import LedgerCore
import FCMWire

/// A message waiting for a device: a send after the device's cursor whose audience contains it.
public struct InboxMessage: Sendable, Equatable {
    /// The seq of the `sent` event: the cursor a device acknowledges through.
    public var cursor: UInt64
    public var messageID: UInt64
    public var sentTime: LedgerTime
    public var target: MessageTarget
    /// The message as accepted (JSON).
    public var messageJSON: [UInt8]
    /// What the app receives (``DevicePayload``, for the device's platform) as JSON with sorted keys:
    /// rendered once per send and platform, and shared by every device of that platform that gets it.
    public var payloadJSON: [UInt8]
    /// When the message stops being delivered.
    public var expires: LedgerTime
    /// A newer undelivered message with the same key replaces this one (``DevicePayload/collapseKey``).
    public var collapseKey: String?
    public var priority: DevicePayload.Priority
    /// The APNs push type, for iOS devices.
    public var pushType: String?
}

/// A page of a device's inbox.
public struct InboxPage: Sendable, Equatable {
    /// The messages, oldest first.
    public var messages: [InboxMessage]
    /// Every send at or before this seq has been looked at: read on from here next time.
    public var through: UInt64
}

/// How long undelivered messages are kept: FCM's default and maximum time to live, 4 weeks.
public let defaultMessageLifetime: Int64 = 28 * 24 * 3600 * 1_000_000

extension LedgerSnapshot {
    /// The device's delivery cursor: every message sent at or before this seq is acknowledged (0: none).
    public func acknowledgedThrough(_ instance: InstanceID) throws -> UInt64 {
        try LMDBProjection(txn: txn, schema: schema).acknowledgedThrough(instance)
    }

    /// The device's inbox — a pure function of the log: the sends after `cursor` whose audience (the state at
    /// their own seq) contains `instance`, oldest first, without those expired at `now`, at most `limit`.
    ///
    /// Reads the `sends` index from the cursor (never before the instance's first registration, nor before
    /// the longest lifetime a message can have). Each send's audience is computed once from the temporal
    /// index and kept in `sends` (shared by every device of the project: a send to a topic with a thousand
    /// streaming devices is decoded and evaluated once, not a thousand times).
    public func inbox(
        of instance: InstanceID, after cursor: UInt64, now: LedgerTime, limit: Int, sends cache: SendCache
    ) throws -> InboxPage {
        guard let info = try self.instance(instance), let firstRegistration = try firstRegistration(of: instance)
        else { return InboxPage(messages: [], through: cursor) }
        // The cursor comes from the device: a cursor past the log (up to UInt64.max) has nothing after it.
        guard cursor < (try head().seq) else { return InboxPage(messages: [], through: cursor) }
        var from = max(cursor, firstRegistration > 0 ? firstRegistration - 1 : 0) + 1
        // A device back after a long time: skip what has expired for everyone (one binary search, only then).
        // The first send's time comes from the cache when it is there, as it is for a streaming device.
        if let first = try txn.withCursor(schema.sends, { try $0.seek(from)?.key.loadBigEndianUInt64() }),
            let sentAt = try cache.cached(at: first)?.time ?? event(at: first)?.time,
            now.microseconds.addingClamped(-defaultMessageLifetime) > sentAt.microseconds
        {
            let oldestLive = try seq(
                atOrBefore: LedgerTime(microseconds: now.microseconds.addingClamped(-defaultMessageLifetime)))
            from = max(from, oldestLive + 1)
        }
        let platform = DevicePlatform(registered: info.platform)
        var messages: [InboxMessage] = []
        var through = cursor
        try forEachSendBatch(from: from) { batch in
            for seq in batch where messages.count < limit {
                through = max(through, seq)
                let send = try cache.send(at: seq, in: self)
                guard send.audience.contains(instance) else { continue }
                let expires = send.expiry(platform: info.platform)
                guard now < expires else { continue }
                let delivery = send.delivery(for: platform)
                messages.append(
                    InboxMessage(
                        cursor: seq, messageID: send.sent.messageID, sentTime: send.time, target: send.sent.target,
                        messageJSON: send.sent.messageJSON, payloadJSON: delivery.payloadJSON, expires: expires,
                        collapseKey: delivery.collapseKey, priority: delivery.priority, pushType: delivery.pushType))
            }
            return messages.count < limit
        }
        try dropCollapsed(
            &messages, of: instance, info: info, platform: platform, after: through, now: now, sends: cache)
        return InboxPage(messages: messages, through: through)
    }

    /// Removes each message with a collapse key for which a newer message with the same key awaits the device
    /// — later in `messages` or among the sends after `through` (read to the head: only when a message of
    /// the page has a key). The cursor still moves past the removed ones: they are replaced, not pending.
    private func dropCollapsed(
        _ messages: inout [InboxMessage], of instance: InstanceID, info: InstanceInfo, platform: DevicePlatform,
        after through: UInt64, now: LedgerTime, sends cache: SendCache
    ) throws {
        var newest: [String: UInt64] = [:]
        for message in messages {
            if let key = message.collapseKey { newest[key] = max(newest[key] ?? 0, message.cursor) }
        }
        guard !newest.isEmpty else { return }
        try forEachSendBatch(from: through + 1) { batch in
            for seq in batch {
                let send = try cache.send(at: seq, in: self)
                guard let key = send.delivery(for: platform).collapseKey, newest[key] != nil,
                    send.audience.contains(instance), now < send.expiry(platform: info.platform)
                else { continue }
                newest[key] = seq
            }
            return true
        }
        messages.removeAll { message in message.collapseKey.map { newest[$0] ?? 0 > message.cursor } ?? false }
    }

    /// Calls `body` with the seqs of the sends from `start` on, up to 512 at a time (each batch read in a
    /// cursor pass of its own, so that `body` may read the log), until it returns `false` or they end.
    private func forEachSendBatch(from start: UInt64, _ body: ([UInt64]) throws -> Bool) throws {
        var from = start
        while true {
            var batch: [UInt64] = []
            try txn.withCursor(schema.sends) { sendCursor in
                var entry = try sendCursor.seek(from)
                while let current = entry, batch.count < 512 {
                    batch.append(current.key.loadBigEndianUInt64())
                    entry = try sendCursor.next()
                }
            }
            guard let last = batch.last else { return }
            guard try body(batch), last < UInt64.max else { return }
            from = last + 1
        }
    }

    /// The seq of the instance's first registration, if it was ever registered.
    func firstRegistration(of instance: InstanceID) throws -> UInt64? {
        var first = try LMDBProjection(txn: txn, schema: schema).registeredSince(instance)
        try forEachClosedInterval(in: schema.universeHistory, key: universeKey, of: instance) { interval in
            first = min(first ?? .max, interval.start)
        }
        return first
    }
}

/// A send as delivery needs it: decoded once, its audience computed once (it never changes: it is the
/// state at the send's own seq), its device payload rendered once.
public struct PreparedSend: Sendable {
    public let seq: UInt64
    public let sent: SentMessage
    public let time: LedgerTime
    public let audience: InstanceSet
    /// What a device of each platform receives (``DevicePayload``), rendered once.
    let deliveries: [PlatformDelivery]
    let expiries: MessageLifetime.Expiries

    /// What a device of `platform` receives.
    public func delivery(for platform: DevicePlatform) -> PlatformDelivery {
        deliveries.first { $0.platform == platform } ?? deliveries[0]
    }

    public func expiry(platform: String?) -> LedgerTime {
        switch platform?.lowercased() {
        case "android": expiries.android
        case "ios": expiries.ios
        case "web": expiries.web
        default: expiries.other
        }
    }
}

/// A send's payload for one platform, as JSON, with its delivery attributes.
public struct PlatformDelivery: Sendable {
    public let platform: DevicePlatform
    public let payloadJSON: [UInt8]
    public let collapseKey: String?
    public let priority: DevicePayload.Priority
    public let pushType: String?

    init(_ payload: DevicePayload) {
        platform = payload.platform
        payloadJSON = payload.json
        collapseKey = payload.collapseKey
        priority = payload.priority
        pushType = payload.pushType
    }
}

/// The most recent sends of one project, prepared for delivery and shared by every device's inbox.
///
/// - Note: Thread-safe. Entries are immutable facts about the log, so a stale entry cannot exist; the cache
///   only bounds memory (the newest `capacity` sends are kept).
public final class SendCache: Sendable {
    private let entries = Mutex<[UInt64: PreparedSend]>([:])
    private let capacity: Int
    /// The project the sends belong to: the `from` of a payload that is not a topic send.
    public let project: ProjectID

    public init(project: ProjectID, capacity: Int = 1024) {
        self.project = project
        self.capacity = capacity
    }

    /// The send at `seq` if it is in the cache.
    public func cached(at seq: UInt64) -> PreparedSend? {
        entries.withLock { $0[seq] }
    }

    /// The send at `seq`, prepared (from the cache, or read from `snapshot` and kept).
    public func send(at seq: UInt64, in snapshot: LedgerSnapshot) throws -> PreparedSend {
        if let cached = cached(at: seq) { return cached }
        let (event, sent) = try snapshot.sentEvent(at: seq)
        let audience = try snapshot.audience(of: sent.target, precedence: sent.precedence, at: seq)
        // The stored message is parsed once, for its lifetimes and its payload.
        let object = DevicePayload.object(ofMessageJSON: sent.messageJSON)
        let deliveries = DevicePlatform.allCases.map { platform in
            PlatformDelivery(
                DevicePayload(
                    ofObject: object, messageID: sent.messageID, target: sent.target, project: project,
                    platform: platform))
        }
        let prepared = PreparedSend(
            seq: seq, sent: sent, time: event.time, audience: audience, deliveries: deliveries,
            expiries: MessageLifetime.expiries(of: object, sentAt: event.time))
        entries.withLock { entries in
            entries[seq] = prepared
            if entries.count > capacity, let oldest = entries.keys.min() { entries[oldest] = nil }
        }
        return prepared
    }
}

/// When a message stops being delivered: `android.ttl` (`"3.5s"`) for Android devices, the
/// `apns-expiration` header (UNIX seconds) for iOS devices, the Web Push `TTL` header (seconds) for web
/// devices — each platform honours only its own — and for a device registered without a platform
/// whichever of the first two the message gives; 4 weeks when none applies. Never later than 4 weeks
/// (FCM's maximum).
enum MessageLifetime {
    struct Expiries: Sendable {
        var android: LedgerTime
        var ios: LedgerTime
        var web: LedgerTime
        var other: LedgerTime
    }

    /// - Parameter message: the stored message, parsed (empty if it is not a JSON object).
    static func expiries(of message: [String: JSONValue], sentAt sent: LedgerTime) -> Expiries {
        let fallback = LedgerTime(microseconds: sent.microseconds.addingClamped(defaultMessageLifetime))
        // Every number here comes from a stored message: parsed with range checks, never trapping (a TTL
        // outside 0…4 weeks, which validation refuses today, counts as none).
        let android = message["android"]?.object?["ttl"]?.string
            .flatMap(MessageLifetimeBounds.microseconds(ofDuration:))
            .map { min(LedgerTime(microseconds: sent.microseconds.addingClamped($0)), fallback) }
        let apns = header("apns-expiration", of: "apns", in: message)
            .flatMap(MessageLifetimeBounds.expiryMicroseconds(ofAPNsExpiration:))
            .map { min(LedgerTime(microseconds: $0), fallback) }
        let web = header("ttl", of: "webpush", in: message)
            .flatMap(MessageLifetimeBounds.seconds(ofWebPushTTL:))
            .map { min(LedgerTime(microseconds: sent.microseconds.addingClamped($0 * 1_000_000)), fallback) }
        return Expiries(
            android: android ?? fallback, ios: apns ?? fallback, web: web ?? fallback,
            other: android ?? apns ?? fallback)
    }
}

/// A header of `message[config].headers` by its lowercased name: HTTP header names are case-insensitive,
/// and validation and the payload mapping read them so.
private func header(_ lowercasedName: String, of config: String, in message: [String: JSONValue]) -> String? {
    let headers = message[config]?.object?["headers"]?.object ?? [:]
    return headers.first { $0.key.lowercased() == lowercasedName }?.value.string
}

extension Int64 {
    /// `self + other`, saturating at the bounds instead of trapping.
    func addingClamped(_ other: Int64) -> Int64 {
        let (sum, overflow) = addingReportingOverflow(other)
        guard overflow else { return sum }
        return other > 0 ? .max : .min
    }
}
