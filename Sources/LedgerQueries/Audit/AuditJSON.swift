import LedgerStore
import Foundation
import LedgerCore
import FCMWire

/// The JSON shapes of replay and audit answers, shared by the CLI (`--format json`) and the audit API so
/// both say the same thing the same way: `Encodable` types written by ``data(_:)`` (keys sorted, slashes
/// unescaped); lowerCamelCase keys; message ids as decimal strings (63-bit ids do not survive a JavaScript
/// number); seqs as numbers; times as RFC 3339.
///
/// This output is audit data and carries tokens by design; it must never be sent to a log.
public enum AuditJSON {
    /// `ledger replay` / `GET …/audit/messages/{id}`. `recipients` is the page of tokens to include (all of
    /// them for the CLI); `acknowledgedRecipients` lists those of the page that acknowledged the message.
    public static func replay(_ replay: MessageReplay, project: ProjectID, recipients: ArraySlice<RegistrationToken>)
        -> Replay
    {
        Replay(
            name: "projects/\(project)/messages/\(replay.messageID)",
            messageId: String(replay.messageID), seq: replay.seq, time: replay.time.description,
            target: Target(replay.target), precedence: replay.precedence.rawValue,
            recipients: recipients.map(\.rawValue), recipientDevices: recipients.indices.map { replay.devices[$0] },
            recipientCount: replay.recipientCount, recipientDigest: hex(replay.recipientDigest),
            digestVersion: Int(replay.digestVersion.rawValue), digestRecomputable: replay.digestRecomputable,
            recordedCount: replay.recorded.map { Int($0.record.recipientCount) },
            recordedDigest: replay.recorded.map { hex($0.record.recipientDigest) },
            audienceSeq: replay.recorded.map(\.seq), matchesRecord: replay.matchesRecord,
            erasedRecipients: replay.erasedRecipients,
            acknowledgedCount: replay.acknowledgedCount,
            acknowledgedRecipients: recipients.indices.filter { replay.acknowledged[$0] }.map {
                replay.recipients[$0].rawValue
            },
            pushCounts: PushCounts(replay.pushes),
            pushes: recipients.indices.compactMap { index in
                replay.pushes[index].map { RecipientPush(token: replay.recipients[index].rawValue, Push($0)) }
            },
            message: try? JSONValue(parsing: replay.messageJSON),
            contentForgotten: replay.contentForgotten.map { "content forgotten by \($0)" },
            broadcast: replay.broadcast.map(Broadcast.init))
    }

    /// `ledger audit instance` / `GET …/audit/instances/{token}`.
    public static func instance(_ audit: InstanceAudit, in snapshot: LedgerSnapshot) throws -> Instance {
        var times = TimeLookup(snapshot: snapshot)
        return Instance(
            token: audit.token.rawValue, at: try times.moment(audit.at), registered: audit.registeredAt,
            topics: audit.topicsAt.map(\.rawValue), platform: audit.platform, appId: audit.appID,
            registrations: try audit.registrations.map { try times.interval($0) },
            subscriptions: try audit.subscriptions.map { subscription in
                Instance.Subscription(
                    topic: subscription.topic.rawValue, held: try times.interval(subscription.interval))
            },
            apnsTokens: try audit.apnsTokens.map { held in
                Instance.APNsToken(
                    apnsToken: held.token.hex, sandbox: held.token.sandbox, held: try times.interval(held.interval))
            },
            acknowledgedThroughSeq: audit.acknowledgedThrough,
            deliveries: audit.deliveries.map { delivery in
                Instance.Delivery(
                    messageId: String(delivery.messageID), seq: delivery.seq, time: delivery.time.description,
                    target: Target(delivery.target), acknowledged: delivery.acknowledged,
                    push: delivery.push.map(Push.init))
            })
    }

    /// `ledger audit topic` / `GET …/audit/topics/{topic}[/history]`. `members` and `history` are the pages
    /// to include (left out when `nil`).
    public static func topic(
        _ audit: TopicAudit, members: ArraySlice<RegistrationToken>?,
        history: ArraySlice<(seq: UInt64, count: Int)>?, in snapshot: LedgerSnapshot
    ) throws -> Topic {
        var times = TimeLookup(snapshot: snapshot)
        return Topic(
            topic: audit.topic.rawValue, at: try times.moment(audit.at), subscriberCount: audit.subscriberCount,
            history: try history?.map { Topic.Count(seq: $0.seq, time: try times.time($0.seq), count: $0.count) },
            members: members?.map(\.rawValue))
    }

    /// `value` as JSON with sorted keys and unescaped slashes.
    public static func data(_ value: some Encodable) throws -> Data {
        try encoder.encode(value)
    }

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    public static func hex(_ bytes: [UInt8]) -> String { Hex.encode(bytes) }

    /// A message's replay.
    public struct Replay: Encodable, Sendable {
        public let name: String
        public let messageId: String
        public let seq: UInt64
        public let time: String
        public let target: Target
        public let precedence: String
        public let recipients: [String]
        /// The page's recipients' device numbers, in the order of `recipients`: what a version-2 digest is over.
        public let recipientDevices: [UInt32]
        public let recipientCount: Int
        public let recipientDigest: String
        /// What both digests are over: 2, the device numbers; 1, the tokens (``RecipientDigest/Version``).
        public let digestVersion: Int
        /// False when the digest is of version 1 and a recipient was erased since: only the count is compared.
        public let digestRecomputable: Bool
        /// What the `audience` event recorded; `null` (not left out) before it is recorded.
        public let recordedCount: Int?
        public let recordedDigest: String?
        public let audienceSeq: UInt64?
        public let matchesRecord: Bool
        /// Recipients erased since the send, listed by their pseudonyms.
        public let erasedRecipients: Int
        public let acknowledgedCount: Int
        public let acknowledgedRecipients: [String]
        /// Over every recipient, how their APNs pushes went (`nil` when none held an APNs token).
        public let pushCounts: PushCounts?
        /// The APNs pushes of the page's recipients that held an APNs token at the send.
        public let pushes: [RecipientPush]
        /// The message as sent, when its stored JSON reads back.
        public let message: JSONValue?
        /// "content forgotten by erasure" or "… by retention at <time>": `message` is then empty or rewritten.
        public let contentForgotten: String?
        /// A topic's Live Activity send: its one broadcast, which addressed every recipient once Apple accepted it
        /// (left out otherwise).
        public var broadcast: Broadcast? = nil
        /// The next page of recipients (the API only).
        public var nextPageToken: String?

        private enum CodingKeys: String, CodingKey {
            case name, messageId, seq, time, target, precedence, recipients, recipientDevices, recipientCount
            case recipientDigest, digestVersion, digestRecomputable, recordedCount, recordedDigest, audienceSeq,
                matchesRecord, erasedRecipients, acknowledgedCount
            case acknowledgedRecipients, pushCounts, pushes, message, contentForgotten, broadcast, nextPageToken
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(name, forKey: .name)
            try container.encode(messageId, forKey: .messageId)
            try container.encode(seq, forKey: .seq)
            try container.encode(time, forKey: .time)
            try container.encode(target, forKey: .target)
            try container.encode(precedence, forKey: .precedence)
            try container.encode(recipients, forKey: .recipients)
            try container.encode(recipientDevices, forKey: .recipientDevices)
            try container.encode(recipientCount, forKey: .recipientCount)
            try container.encode(recipientDigest, forKey: .recipientDigest)
            try container.encode(digestVersion, forKey: .digestVersion)
            try container.encode(digestRecomputable, forKey: .digestRecomputable)
            try container.encode(recordedCount, forKey: .recordedCount)
            try container.encode(recordedDigest, forKey: .recordedDigest)
            try container.encode(audienceSeq, forKey: .audienceSeq)
            try container.encode(matchesRecord, forKey: .matchesRecord)
            try container.encode(erasedRecipients, forKey: .erasedRecipients)
            try container.encode(acknowledgedCount, forKey: .acknowledgedCount)
            try container.encode(acknowledgedRecipients, forKey: .acknowledgedRecipients)
            try container.encodeIfPresent(pushCounts, forKey: .pushCounts)
            try container.encode(pushes, forKey: .pushes)
            try container.encodeIfPresent(message, forKey: .message)
            try container.encodeIfPresent(contentForgotten, forKey: .contentForgotten)
            try container.encodeIfPresent(broadcast, forKey: .broadcast)
            try container.encodeIfPresent(nextPageToken, forKey: .nextPageToken)
        }
    }

    /// A send's broadcast (``RecordedBroadcast``): `{"state", "channelId", "status", "reason", "apnsRequestId",
    /// "seq", "time", "recipients", "summary"}`, the unknown ones left out; `recipients` is `addressed` only when
    /// Apple accepted it.
    public struct Broadcast: Encodable, Sendable {
        public let state: String
        public let channelId: String?
        public let status: UInt16?
        public let reason: String?
        public let apnsRequestId: String?
        public let seq: UInt64?
        public let time: String?
        /// `addressed` once Apple accepted it (Apple does not say which devices held the channel), `pending`
        /// before it is made, `notAddressed` when it was refused, expired or never made.
        public let recipients: String
        public let summary: String

        init(_ broadcast: RecordedBroadcast) {
            state = broadcast.state.rawValue
            channelId = broadcast.channelID.isEmpty ? nil : broadcast.channelID
            status = broadcast.status
            reason = broadcast.reason
            apnsRequestId = broadcast.apnsRequestID
            seq = broadcast.seq
            time = broadcast.time?.description
            summary = broadcast.summary
            recipients = broadcast.recipients
        }
    }

    /// An instance's history and its topics at a moment.
    public struct Instance: Encodable, Sendable {
        /// An interval of ``Interval``'s shape with the topic held.
        public struct Subscription: Encodable, Sendable {
            public let topic: String
            public let fromSeq: UInt64
            public let fromTime: String
            public let untilSeq: UInt64?
            public let untilTime: String?

            package init(topic: String, held: Interval) {
                self.topic = topic
                fromSeq = held.fromSeq
                fromTime = held.fromTime
                untilSeq = held.untilSeq
                untilTime = held.untilTime
            }
        }

        /// An APNs device token (hex) with the interval it was held.
        public struct APNsToken: Encodable, Sendable {
            public let apnsToken: String
            public let sandbox: Bool
            public let fromSeq: UInt64
            public let fromTime: String
            public let untilSeq: UInt64?
            public let untilTime: String?

            init(apnsToken: String, sandbox: Bool, held: Interval) {
                self.apnsToken = apnsToken
                self.sandbox = sandbox
                fromSeq = held.fromSeq
                fromTime = held.fromTime
                untilSeq = held.untilSeq
                untilTime = held.untilTime
            }
        }

        public struct Delivery: Encodable, Sendable {
            public let messageId: String
            public let seq: UInt64
            public let time: String
            public let target: Target
            public let acknowledged: Bool
            /// Its APNs push, when the instance held an APNs token at the send.
            public let push: Push?
        }

        public let token: String
        public let at: Moment
        public let registered: Bool
        public let topics: [String]
        public let platform: String?
        public let appId: String?
        public let registrations: [Interval]
        public let subscriptions: [Subscription]
        /// Every APNs token the instance held, oldest first.
        public let apnsTokens: [APNsToken]
        public let acknowledgedThroughSeq: UInt64
        public let deliveries: [Delivery]
    }

    /// A topic's subscriber count at a moment, with the pages of members and count history asked for.
    public struct Topic: Encodable, Sendable {
        public struct Count: Encodable, Sendable {
            public let seq: UInt64
            public let time: String
            public let count: Int
        }

        public let topic: String
        public let at: Moment
        public let subscriberCount: Int
        public let history: [Count]?
        public let members: [String]?
        public var nextPageToken: String?
    }

    /// What became of one APNs push: `outcome` (accepted, unregistered, failed, pending, expired), the APNs
    /// token and `apns-id` it went to, APNs' `status` and `reason` for a refusal, and the `pushProgress` event
    /// that recorded it (`seq`, `time`). `liveActivity: true` when the token is a Live Activity's (absent
    /// otherwise).
    public struct Push: Encodable, Sendable {
        public let outcome: String
        public let apnsToken: String
        public let liveActivity: Bool?
        public let sandbox: Bool
        public let apnsId: String
        public let status: Int?
        public let reason: String?
        public let seq: UInt64?
        public let time: String?

        init(_ status: PushStatus) {
            outcome = status.state.rawValue
            apnsToken = status.apnsToken.hex
            liveActivity = status.liveActivity ? true : nil
            sandbox = status.apnsToken.sandbox
            apnsId = status.apnsID
            self.status = status.status.map(Int.init)
            reason = status.reason
            seq = status.seq
            time = status.time?.description
        }
    }

    /// A recipient's token with its ``Push``.
    public struct RecipientPush: Encodable, Sendable {
        public let token: String
        public let push: Push

        init(token: String, _ push: Push) {
            self.token = token
            self.push = push
        }
    }

    /// How many of a message's APNs pushes came to each outcome.
    public struct PushCounts: Encodable, Sendable {
        public var accepted = 0, unregistered = 0, failed = 0, pending = 0, expired = 0

        /// `nil` when no recipient held an APNs token.
        public init?(_ pushes: [PushStatus?]) {
            var any = false
            for push in pushes {
                guard let push else { continue }
                any = true
                switch push.state {
                case .accepted: accepted += 1
                case .unregistered: unregistered += 1
                case .failed: failed += 1
                case .pending: pending += 1
                case .expired: expired += 1
                }
            }
            if !any { return nil }
        }
    }

    /// `{"seq":N,"time":…}`; seq 0 (before the first event) has no time.
    public struct Moment: Encodable, Sendable {
        public let seq: UInt64
        public let time: String?
    }

    /// `{"fromSeq","fromTime","untilSeq","untilTime"}`; the until fields are absent while it still holds.
    public struct Interval: Encodable, Sendable {
        public let fromSeq: UInt64
        public let fromTime: String
        public let untilSeq: UInt64?
        public let untilTime: String?
    }

    /// `{"topic": T}`, `{"condition": C}` or `{"token": T}`: a send's target under its kind's name.
    public struct Target: Encodable, Sendable {
        public let kind: String
        public let text: String

        package init(_ target: MessageTarget) {
            kind = target.kindName
            text = target.text
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Kind.self)
            try container.encode(text, forKey: Kind(stringValue: kind))
        }

        private struct Kind: CodingKey {
            let stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }
    }
}

/// Times of events by seq, decoded once each.
struct TimeLookup {
    let snapshot: LedgerSnapshot
    private var cache: [UInt64: String] = [:]

    init(snapshot: LedgerSnapshot) { self.snapshot = snapshot }

    mutating func time(_ seq: UInt64) throws -> String {
        if let cached = cache[seq] { return cached }
        guard let event = try snapshot.event(at: seq) else { throw StoreError(.corrupt, "no event at seq \(seq)") }
        let text = event.time.description
        cache[seq] = text
        return text
    }

    mutating func moment(_ seq: UInt64) throws -> AuditJSON.Moment {
        AuditJSON.Moment(seq: seq, time: seq == 0 ? nil : try time(seq))
    }

    mutating func interval(_ interval: HeldInterval) throws -> AuditJSON.Interval {
        AuditJSON.Interval(
            fromSeq: interval.start, fromTime: try time(interval.start), untilSeq: interval.end,
            untilTime: try interval.end.map { try time($0) })
    }
}

extension AuditJSON {
    /// One erasure or expiry: `{"kind", "seq", "time", "actor", "reason", "device"}`, and for an erasure
    /// `"registeredSeq"` and `"redactedEvents"`. `device` is an erased device's pseudonym, an expired one's token.
    public struct ErasureEntry: Encodable, Sendable {
        public let kind: String
        public let seq: UInt64
        public let time: String
        public let actor: String
        public let reason: String
        public let device: String
        public let registeredSeq: UInt64?
        public let redactedEvents: UInt64?
        public let linkable: UInt64?

        public init(_ record: ErasureRecord) {
            kind = record.kind.rawValue
            seq = record.seq
            time = record.time.rfc3339
            actor = record.actor
            reason = record.reason
            device = record.device.rawValue
            registeredSeq = record.registeredSeq
            redactedEvents = record.redactedEvents
            linkable = record.linkable
        }
    }

    /// `{"erasures": […]}`: the answer of `ledger audit erasures --format json` and `GET …/audit/erasures`.
    public struct Erasures: Encodable, Sendable {
        public let erasures: [ErasureEntry]

        public init(_ records: [ErasureRecord]) {
            erasures = records.map(ErasureEntry.init)
        }
    }
}
