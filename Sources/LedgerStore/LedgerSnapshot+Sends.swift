import LMDBKit
import LedgerCore

/// One send as the audit console lists it.
public struct SendSummary: Sendable, Equatable {
    public var seq: UInt64
    public var messageID: UInt64
    public var time: LedgerTime
    public var target: MessageTarget
    /// The recorded audience's size, once the audience event is written.
    public var recordedCount: UInt64?
}

/// A page of sends, newest first, and where the next page starts.
public struct SendPage: Sendable, Equatable {
    public var sends: [SendSummary]
    /// The `before` of the next page; `nil` when the log holds no older send.
    public var nextBefore: UInt64?
}

extension LedgerSnapshot {
    /// The sends before seq `before` (from the head when `nil`), newest first: up to `limit` of them that
    /// `matching` accepts, looking at no more than `scanLimit` sends — so a filter that matches nothing in a
    /// long log answers in bounded time with where to go on (`nextBefore`).
    public func sends(
        before: UInt64?, limit: Int, scanLimit: Int = 100_000, matching: (SendSummary) -> Bool = { _ in true }
    ) throws -> SendPage {
        var scanned = 0
        var older: UInt64?
        var page: [SendSummary] = []
        try txn.withCursor(schema.sends) { cursor in
            // Before `before`: the entry before the first at or after it, or the last when none is.
            var entry = try before.flatMap { try cursor.seek($0) } != nil ? try cursor.previous() : try cursor.last()
            while let current = entry, page.count < limit, scanned < max(scanLimit, limit) {
                let seq = current.key.loadBigEndianUInt64()
                scanned += 1
                let (event, sent) = try sentEvent(at: seq)
                let recorded = try message(sent.messageID)?.audienceSeq
                var recordedCount: UInt64?
                if let recorded, case .audience(let record)? = try self.event(at: recorded)?.body {
                    recordedCount = record.recipientCount
                }
                let summary = SendSummary(
                    seq: seq, messageID: sent.messageID, time: event.time, target: sent.target,
                    recordedCount: recordedCount)
                if matching(summary) { page.append(summary) }
                entry = try cursor.previous()
            }
            if let current = entry { older = current.key.loadBigEndianUInt64() + 1 }
        }
        return SendPage(sends: page, nextBefore: older)
    }
}

extension MessageReplay {
    /// `ledger replay --format csv` and the console's download: a `token` header, then one recipient per line in
    /// byte order, each written as a ``CSVCell`` (a token that begins with `-` as `"'-…"`, so that a spreadsheet
    /// does not read it as a formula).
    public var csv: [UInt8] {
        var out = Array("token\n".utf8)
        for token in recipients {
            CSVCell.append(token.rawValue, to: &out)
            out.append(UInt8(ascii: "\n"))
        }
        return out
    }
}

/// A page of a topic's members at a moment, in instance-id (registration) order.
public struct MemberPage: Sendable, Equatable {
    public var count: Int
    public var members: [(instance: InstanceID, token: RegistrationToken)]
    /// The `after` of the next page; `nil` on the last.
    public var nextAfter: InstanceID?

    public static func == (a: MemberPage, b: MemberPage) -> Bool {
        a.count == b.count && a.nextAfter == b.nextAfter && a.members.map(\.instance) == b.members.map(\.instance)
    }
}

extension LedgerSnapshot {
    /// `topic`'s members at `seq` (now, when `nil`) after instance `after`, up to `limit` — resolving only
    /// their tokens, so a page of a million-member topic costs its bitmap and `limit` lookups. `nil` when the
    /// topic was never subscribed to.
    public func members(of topic: TopicName, at seq: UInt64?, after: InstanceID?, limit: Int) throws -> MemberPage? {
        guard let id = try topicID(of: topic) else { return nil }
        let set = try memberSet(of: id, at: seq, capacity: try instanceIDBound())
        let ids = set.ids(after: after, limit: limit + 1)
        var members: [(InstanceID, RegistrationToken)] = []
        for instance in ids.prefix(limit) {
            guard let token = try token(of: instance) else {
                throw StoreError(.corrupt, "instance \(instance) has no token")
            }
            members.append((instance, token))
        }
        return MemberPage(count: set.count, members: members, nextAfter: ids.count > limit ? members.last?.0 : nil)
    }
}
