import LedgerStore
import Foundation
import Synchronization
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
    /// The platform whose payload this is (the device's, or iOS's for a device registered without one).
    public var platform: DevicePlatform
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

/// A send as delivery needs it: decoded once, its audience computed once (it never changes: it is the
/// state at the send's own seq), its device payload rendered once.
public struct PreparedSend: Sendable {
    public let seq: UInt64
    public let sent: SentMessage
    public let time: LedgerTime
    public let audience: InstanceSet
    /// Whether the send's content is forgotten (``LedgerEvent/contentForgotten``): it is no longer delivered.
    public let contentForgotten: Bool
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
    /// Where an iOS recipient's APNs push goes (its own APNs token, or a Live Activity's).
    public let apnsDestination: APNsDestination

    init(_ payload: DevicePayload) {
        platform = payload.platform
        payloadJSON = payload.json
        collapseKey = payload.collapseKey
        priority = payload.priority
        pushType = payload.pushType
        apnsDestination = payload.apnsDestination
    }
}

/// The most recent sends of one project, prepared for delivery and shared by every device's inbox.
///
/// - Note: Thread-safe. Entries are immutable facts about the log — once acknowledged, the only sends read into
///   it — so a stale entry cannot exist but after a cluster's node rolled back a suffix it committed ahead of
///   etcd, which empties it (``removeAll()``); the cache only bounds memory (the newest `capacity` sends are
///   kept).
public final class SendCache: Sendable {
    private let entries = Mutex<[UInt64: PreparedSend]>([:])
    private let capacity: Int
    /// The project the sends belong to: the `from` of a payload that is not a topic send.
    public let project: ProjectID

    public init(project: ProjectID, capacity: Int = 1024) {
        self.project = project
        self.capacity = capacity
    }

    /// Forgets every send (the log was rolled back).
    public func removeAll() {
        entries.withLock { $0.removeAll() }
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
                    platform: platform, destination: sent.apnsDestination))
        }
        let prepared = PreparedSend(
            seq: seq, sent: sent, time: event.time, audience: audience,
            contentForgotten: event.contentForgotten != nil, deliveries: deliveries,
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
