import Foundation
import LMDBKit
import LedgerCore

/// A message waiting for a device: a send after the device's cursor whose audience contains it.
public struct InboxMessage: Sendable, Equatable {
    /// The seq of the `sent` event: the cursor a device acknowledges through.
    public var cursor: UInt64
    public var messageID: UInt64
    public var sentTime: LedgerTime
    public var target: MessageTarget
    /// The message as accepted (JSON).
    public var messageJSON: [UInt8]
    /// When the message stops being delivered.
    public var expires: LedgerTime
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
    /// the longest lifetime a message can have) and checks each send against the instance's own history:
    /// O(sends scanned × the instance's history), independent of audience sizes.
    public func inbox(of instance: InstanceID, after cursor: UInt64, now: LedgerTime, limit: Int) throws
        -> [InboxMessage]
    {
        guard let info = try self.instance(instance) else { return [] }
        guard let firstRegistration = try firstRegistration(of: instance) else { return [] }
        let oldestLive = try seq(atOrBefore: LedgerTime(microseconds: now.microseconds - defaultMessageLifetime))
        var from = max(cursor, oldestLive, firstRegistration - 1) + 1
        var messages: [InboxMessage] = []
        var conditions: [String: Condition] = [:]
        while messages.count < limit {
            var batch: [UInt64] = []
            try txn.withCursor(schema.sends) { sendCursor in
                var entry = try sendCursor.seek(from)
                while let current = entry, batch.count < 512 {
                    batch.append(current.key.loadBigEndianUInt64())
                    entry = try sendCursor.next()
                }
            }
            guard let last = batch.last else { break }
            from = last + 1
            for seq in batch where messages.count < limit {
                let (event, sent) = try sentEvent(at: seq)
                guard try reaches(sent, instance: instance, token: info.token, at: seq, conditions: &conditions)
                else { continue }
                let expires = MessageLifetime.expiry(of: sent.messageJSON, sentAt: event.time, platform: info.platform)
                guard now < expires else { continue }
                messages.append(
                    InboxMessage(
                        cursor: seq, messageID: sent.messageID, sentTime: event.time, target: sent.target,
                        messageJSON: sent.messageJSON, expires: expires))
            }
        }
        return messages
    }

    /// Whether the send at `seq` was addressed to `instance`: registered then, and its topics then satisfied
    /// the target.
    private func reaches(
        _ sent: SentMessage, instance: InstanceID, token: RegistrationToken, at seq: UInt64,
        conditions: inout [String: Condition]
    ) throws -> Bool {
        guard try isRegistered(instance, at: seq) else { return false }
        switch sent.target {
        case .token(let target):
            return target == token
        case .topic(let name):
            guard let topic = try topicID(of: name) else { return false }
            return try topics(of: instance, at: seq).contains(topic)
        case .condition(let text):
            let key = sent.precedence.rawValue + "\u{0}" + text
            if conditions[key] == nil { conditions[key] = try Condition(parsing: text, precedence: sent.precedence) }
            let names = try Set(topics(of: instance, at: seq).compactMap { try topicName(of: $0) })
            return conditions[key]!.isSatisfied(byTopics: names)
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

/// When a message stops being delivered: `android.ttl` (`"3.5s"`) for Android devices, the
/// `apns-expiration` header (UNIX seconds) for iOS devices — each platform honours only its own — and for
/// other platforms whichever of them the message gives; 4 weeks when none applies. Never later than 4
/// weeks (FCM's maximum).
enum MessageLifetime {
    static func expiry(of messageJSON: [UInt8], sentAt sent: LedgerTime, platform: String?) -> LedgerTime {
        let fallback = LedgerTime(microseconds: sent.microseconds + defaultMessageLifetime)
        guard let message = try? JSONSerialization.jsonObject(with: Data(messageJSON)) as? [String: Any] else {
            return fallback
        }
        let android = ((message["android"] as? [String: Any])?["ttl"] as? String).flatMap(seconds(ofDuration:))
            .map { LedgerTime(microseconds: sent.microseconds + Int64($0 * 1_000_000)) }
        let apnsHeaders = (message["apns"] as? [String: Any])?["headers"] as? [String: Any]
        let apns = (apnsHeaders?["apns-expiration"] as? String).flatMap { Int64($0) }
            .map { LedgerTime(microseconds: $0 * 1_000_000) }
        let chosen: LedgerTime?
        switch platform?.lowercased() {
        case "android": chosen = android
        case "ios": chosen = apns
        default: chosen = android ?? apns
        }
        guard let chosen else { return fallback }
        return min(chosen, fallback)
    }

    /// `"3.5s"` → 3.5 (the JSON form of a protobuf Duration).
    static func seconds(ofDuration text: String) -> Double? {
        guard text.hasSuffix("s"), let value = Double(text.dropLast()), value >= 0 else { return nil }
        return value
    }
}
