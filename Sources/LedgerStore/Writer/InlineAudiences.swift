import LMDBKit
import LedgerCore
import Logging

extension BatchCommit {
    /// Appends, in the transaction of the sends, the `audience` event of each send in `results` to one device or
    /// to a topic of at most ``inlineAudienceLimit`` recipients (``LedgerSnapshot/smallAudience(of:limit:)``), and notes each
    /// in its request's receipt (``WriteReceipt/recordedAudiences``); larger audiences are left to the
    /// recorder, which reads them from a snapshot without holding up the writer (``AudienceRecorder``).
    ///
    /// On a cluster's leader the send and its audience then ride in one block — one etcd transaction for a
    /// lone send, where the recorder's audience would be a second one after it — and etcd takes or refuses
    /// them together: a refused send's audience is rolled back with it, so nothing unacknowledged is ever
    /// recorded apart from its send.
    ///
    /// Runs after the batch's appender finished (the sends are in the log), in a child transaction: when the
    /// audiences cannot be computed or appended, the child is aborted alone, the batch commits without them
    /// and the recorder records them after it. A full map still aborts the batch (it is grown and run again).
    ///
    /// - Returns: the records the audiences appended, for the batch's replicated block (`nil`: none appended).
    func appendSmallAudiences(
        of results: inout [Result<WriteReceipt, any Error>], txn: LMDBTransaction, now: LedgerTime
    )
        throws -> [[UInt8]]?
    {
        let limit = inlineAudienceLimit
        guard limit > 0 else { return nil }
        var sends: [(request: Int, send: PendingAudience)] = []
        for (index, result) in results.enumerated() {
            guard case .success(let receipt) = result else { continue }
            for case .sent(let seq, let messageID) in receipt.outcomes {
                sends.append((index, PendingAudience(messageID: messageID, sendSeq: seq)))
            }
        }
        guard !sends.isEmpty else { return nil }
        let appended: (receipt: WriteReceipt, owners: [(request: Int, messageID: UInt64)], records: [[UInt8]])?
        do {
            appended = try txn.nested { child in
                let snapshot = LedgerSnapshot(txn: child, schema: schema)
                var audiences: [AudienceRecord] = []
                var owners: [(request: Int, messageID: UInt64)] = []
                for (request, send) in sends {
                    guard let audience = try snapshot.smallAudience(of: send, limit: limit) else { continue }
                    audiences.append(audience)
                    owners.append((request, send.messageID))
                }
                guard !audiences.isEmpty else { return nil }
                let request = WriteRequest(
                    actor: "ledger", requestID: "audience-\(RequestID.random())",
                    operations: audiences.map { .recordAudience($0) })
                var start: LedgerHead?
                let appended = try append([request], txn: child, now: now, start: &start)
                return (try appended.results[0].get(), owners, appended.records)
            }
        } catch LMDBError.Code.mapFull {
            throw LMDBError(code: .mapFull, function: "mdb_put")
        } catch {
            // What the child learnt went with it.
            facts.forget()
            logger.warning(
                "could not record audiences with their sends; the recorder records them next",
                metadata: ["ledger.sends": "\(sends.count)", "error": "\(error)"])
            return nil
        }
        guard let appended else { return nil }
        for (owner, outcome) in zip(appended.owners, appended.receipt.outcomes) {
            guard let seq = outcome.seq, case .success(var receipt) = results[owner.request] else { continue }
            receipt.recordedAudiences[owner.messageID] = seq
            results[owner.request] = .success(receipt)
        }
        return appended.records
    }
}

extension LedgerSnapshot {
    /// The `audience` record of `send` as of its seq, when it goes to one device, or to a topic whose
    /// audience has at most `limit` recipients; `nil` otherwise.
    ///
    /// Only what is cheap to rule out is read on the writer's thread: a topic whose count now is over twice the
    /// limit (its member set would be large to read) and a condition (it may read the whole registered
    /// universe, a few milliseconds at a million devices) are left to the recorder unread.
    func smallAudience(of send: PendingAudience, limit: Int) throws -> AudienceRecord? {
        let (_, sent) = try sentEvent(at: send.sendSeq)
        switch sent.target {
        case .token:
            break
        case .topic(let name):
            if let topic = try topicID(of: name), try subscriberCount(of: topic) / 2 > limit { return nil }
        case .condition:
            return nil
        }
        let members = try audience(of: sent.target, precedence: sent.precedence, at: send.sendSeq)
        guard members.count <= limit else { return nil }
        let (count, digest) = try recipientDigest(members)
        return AudienceRecord(
            messageID: send.messageID, sendSeq: send.sendSeq, recipientCount: UInt64(count), recipientDigest: digest)
    }
}
