import Foundation
import LedgerCore

/// The JSON shapes of replay and audit answers, shared by the CLI (`--format json`) and the audit API so
/// both say the same thing the same way. Objects for `JSONSerialization`; lowerCamelCase keys; message ids
/// as decimal strings (63-bit ids do not survive a JavaScript number); seqs as numbers; times as RFC 3339.
///
/// This output is audit data and carries tokens by design; it must never be sent to a log.
public enum AuditJSON {
    /// `ledger replay` / `GET …/audit/messages/{id}`. `recipients` is the page of tokens to include (all of
    /// them for the CLI); `acknowledgedRecipients` lists those of the page that acknowledged the message.
    public static func replay(_ replay: MessageReplay, project: ProjectID, recipients: ArraySlice<RegistrationToken>)
        -> [String: Any]
    {
        let acknowledged = recipients.indices.filter { replay.acknowledged[$0] }.map { replay.recipients[$0].rawValue }
        var object: [String: Any] = [
            "name": "projects/\(project)/messages/\(replay.messageID)",
            "messageId": String(replay.messageID),
            "seq": replay.seq,
            "time": replay.time.description,
            "target": [replay.target.kindName: replay.target.text],
            "precedence": replay.precedence.rawValue,
            "recipients": recipients.map(\.rawValue),
            "recipientCount": replay.recipientCount,
            "recipientDigest": hex(replay.recipientDigest),
            "recordedCount": replay.recorded.map { Int($0.record.recipientCount) } as Any? ?? NSNull(),
            "recordedDigest": replay.recorded.map { hex($0.record.recipientDigest) } as Any? ?? NSNull(),
            "audienceSeq": replay.recorded.map(\.seq) as Any? ?? NSNull(),
            "matchesRecord": replay.matchesRecord,
            "acknowledgedCount": replay.acknowledgedCount,
            "acknowledgedRecipients": acknowledged,
        ]
        if let message = try? JSONSerialization.jsonObject(with: Data(replay.messageJSON)) {
            object["message"] = message
        }
        return object
    }

    /// `ledger audit instance` / `GET …/audit/instances/{token}`.
    public static func instance(_ audit: InstanceAudit, in snapshot: LedgerSnapshot) throws -> [String: Any] {
        var times = TimeLookup(snapshot: snapshot)
        var object: [String: Any] = [
            "token": audit.token.rawValue,
            "at": try times.moment(audit.at),
            "registered": audit.registeredAt,
            "topics": audit.topicsAt.map(\.rawValue),
            "registrations": try audit.registrations.map { try times.interval($0) },
            "subscriptions": try audit.subscriptions.map { subscription in
                var entry = try times.interval(subscription.interval)
                entry["topic"] = subscription.topic.rawValue
                return entry
            },
        ]
        if let platform = audit.platform { object["platform"] = platform }
        if let appID = audit.appID { object["appId"] = appID }
        object["acknowledgedThroughSeq"] = audit.acknowledgedThrough
        object["deliveries"] = audit.deliveries.map { delivery in
            var target: [String: Any] = [:]
            target[delivery.target.kindName] = delivery.target.text
            return [
                "messageId": String(delivery.messageID), "seq": delivery.seq, "time": delivery.time.description,
                "target": target, "acknowledged": delivery.acknowledged,
            ] as [String: Any]
        }
        return object
    }

    /// `ledger audit topic` / `GET …/audit/topics/{topic}[/history]`. `members` and `history` are the pages
    /// to include (left out when `nil`).
    public static func topic(
        _ audit: TopicAudit, members: ArraySlice<RegistrationToken>?,
        history: ArraySlice<(seq: UInt64, count: Int)>?, in snapshot: LedgerSnapshot
    ) throws -> [String: Any] {
        var times = TimeLookup(snapshot: snapshot)
        var object: [String: Any] = [
            "topic": audit.topic.rawValue,
            "at": try times.moment(audit.at),
            "subscriberCount": audit.subscriberCount,
        ]
        if let history {
            object["history"] = try history.map {
                ["seq": $0.seq, "time": try times.time($0.seq), "count": $0.count] as [String: Any]
            }
        }
        if let members { object["members"] = members.map(\.rawValue) }
        return object
    }

    /// Serializes an object with sorted keys and unescaped slashes.
    public static func data(_ object: Any) throws -> Data {
        try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
    }

    public static func hex(_ bytes: [UInt8]) -> String { Hex.encode(bytes) }
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

    /// `{"seq":N,"time":…}`; seq 0 (before the first event) has no time.
    mutating func moment(_ seq: UInt64) throws -> [String: Any] {
        seq == 0 ? ["seq": 0] : ["seq": seq, "time": try time(seq)]
    }

    /// `{"fromSeq","fromTime","untilSeq","untilTime"}`; the until fields are absent while it still holds.
    mutating func interval(_ interval: HeldInterval) throws -> [String: Any] {
        var object: [String: Any] = ["fromSeq": interval.start, "fromTime": try time(interval.start)]
        if let end = interval.end {
            object["untilSeq"] = end
            object["untilTime"] = try time(end)
        }
        return object
    }
}
