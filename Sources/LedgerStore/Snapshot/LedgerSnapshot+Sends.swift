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
                let summary = SendSummary(
                    seq: seq, messageID: sent.messageID, time: event.time, target: sent.target,
                    recordedCount: try recordedRecipientCount(of: sent.messageID))
                if matching(summary) { page.append(summary) }
                entry = try cursor.previous()
            }
            if let current = entry { older = current.key.loadBigEndianUInt64() + 1 }
        }
        return SendPage(sends: page, nextBefore: older)
    }

    /// The recipient count recorded for the send at `seq` (its `audience` event), or `nil` before it is recorded
    /// or when `seq` is not a send.
    public func recordedRecipientCount(ofSendAt seq: UInt64) throws -> UInt64? {
        guard case .sent(let sent)? = try event(at: seq)?.body else { return nil }
        return try recordedRecipientCount(of: sent.messageID)
    }

    /// The recipient count recorded for message `messageID`, or `nil` before its audience event is written.
    private func recordedRecipientCount(of messageID: UInt64) throws -> UInt64? {
        guard let recorded = try message(messageID)?.audienceSeq,
            case .audience(let record)? = try event(at: recorded)?.body
        else { return nil }
        return record.recipientCount
    }
}
