import LMDBKit
import LedgerCore

/// The histories the queries are built on (LedgerQueries' replay, audits, inbox, proofs and pushes), read from
/// the projections' databases here so that no query reaches a database, a cursor or a stored layout itself:
/// registrations and memberships as intervals, the sends index, the devices' cursors and APNs tokens, and the
/// recorded pushes.
extension LedgerSnapshot {
    // MARK: The log

    /// The event at `seq` as stored: its chain hash and its encoded bytes (what the hash covers after the
    /// previous hash).
    public func storedEvent(at seq: UInt64) throws -> (hash: [UInt8], encoded: [UInt8])? {
        try txn.withValue(in: schema.log, forKey: seq) { record in
            try record.map { record in
                let parts = try HashChain.split(record: record)
                return (Array(parts.hash), Array(parts.encodedEvent))
            }
        }
    }

    /// The seqs of the sends from `start` through `last`, oldest first, at most `limit` of them.
    package func sendSeqs(from start: UInt64, through last: UInt64 = .max, limit: Int = .max) throws -> [UInt64] {
        var seqs: [UInt64] = []
        guard limit > 0 else { return seqs }
        try txn.withCursor(schema.sends) { cursor in
            var entry = try cursor.seek(start)
            while let current = entry, seqs.count < limit {
                let seq = current.key.loadBigEndianUInt64()
                guard seq <= last else { break }
                seqs.append(seq)
                entry = try cursor.next()
            }
        }
        return seqs
    }

    // MARK: Registrations and memberships

    /// The seq of `instance`'s registration in force, or `nil`.
    package func registeredSince(_ instance: InstanceID) throws -> UInt64? {
        try LMDBProjection(txn: txn, schema: schema).registeredSince(instance)
    }

    /// `instance`'s ended registrations, oldest first.
    package func closedRegistrations(of instance: InstanceID) throws -> [HeldInterval] {
        var intervals: [HeldInterval] = []
        try txn.withCursor(schema.universeHistory) { cursor in
            var entry = try cursor.seek(universeKey, value: intervalValue(instance, start: 0, end: 0))
            while let value = entry?.value, StoredInterval(value).id == instance {
                let interval = StoredInterval(value)
                intervals.append(HeldInterval(start: interval.start, end: interval.end))
                entry = try cursor.nextDuplicate()
            }
        }
        return intervals
    }

    /// Calls `body` with each topic `instance` holds now, and the seq its membership began at.
    package func forEachCurrentTopic(of instance: InstanceID, _ body: (TopicID, UInt64) throws -> Void) throws {
        try RecentMemberships.forEachMembership(of: instance, txn: txn, schema: schema, body)
    }

    /// Calls `body` with each ended membership of `instance`: the topic and when it was held.
    package func forEachEndedTopic(of instance: InstanceID, _ body: (TopicID, HeldInterval) throws -> Void) throws {
        try forEachInterval(current: nil, history: schema.instanceTopicHistory, key: instance, body)
    }

    /// Calls `body` with every membership `topic` had or has: the instance and when it was held.
    package func forEachMembership(of topic: TopicID, _ body: (InstanceID, HeldInterval) throws -> Void) throws {
        try forEachInterval(current: schema.topicMembers, history: schema.topicMemberHistory, key: topic, body)
    }

    /// Calls `body` with every interval under `key`: open ones from `current` (none when `nil`), closed ones from
    /// `history`.
    private func forEachInterval(
        current: LMDBDatabase?, history: LMDBDatabase, key: UInt32, _ body: (UInt32, HeldInterval) throws -> Void
    ) throws {
        if let current {
            try txn.withCursor(current) { cursor in
                try cursor.forEachValueChunk(of: key) { chunk in
                    for offset in stride(from: 0, to: chunk.count, by: StoredMembership.size) {
                        let membership = StoredMembership(chunk, at: offset)
                        try body(membership.id, HeldInterval(start: membership.since, end: nil))
                    }
                    return true
                }
            }
        }
        try txn.withCursor(history) { cursor in
            try cursor.forEachValueChunk(of: key) { chunk in
                for offset in stride(from: 0, to: chunk.count, by: StoredInterval.size) {
                    let interval = StoredInterval(chunk, at: offset)
                    try body(interval.id, HeldInterval(start: interval.start, end: interval.end))
                }
                return true
            }
        }
    }

    // MARK: Devices

    /// The device's delivery cursor: every message sent at or before this seq is acknowledged (0: none).
    public func acknowledgedThrough(_ instance: InstanceID) throws -> UInt64 {
        try LMDBProjection(txn: txn, schema: schema).acknowledgedThrough(instance)
    }

    /// Every APNs token `instance` has held, oldest first (the one held now last, with no end).
    package func apnsTokenHistory(of instance: InstanceID) throws -> [HeldAPNsToken] {
        try APNsTokenRecord.history(of: instance, txn: txn, schema: schema)
    }

    /// Whether any instance holds, or ever held, an APNs token: when none does, no send has APNs recipients.
    public func holdsAPNsTokens() throws -> Bool {
        try txn.count(schema.apnsTokens) > 0 || txn.count(schema.apnsTokenHistory) > 0
    }

    // MARK: Pushes

    /// Every send at or before this seq has finished its pushes (0: none recorded).
    public func pushesSettledThrough() throws -> UInt64 {
        try PushRecords.settledThrough(txn: txn, schema: schema)
    }

    /// The progress recorded for the pushes of the send at `sendSeq`, in the order it was recorded.
    package func pushProgressRecords(ofSendAt sendSeq: UInt64) throws -> [PushRecords.State] {
        try PushRecords.progress(of: sendSeq, txn: txn, schema: schema)
    }

    /// The failed push of the send at `sendSeq` to `instance`, with the seq of the event that recorded it.
    package func pushFailure(ofSendAt sendSeq: UInt64, instance: InstanceID) throws -> (
        kind: PushFailure.Kind, status: UInt16, reason: String, seq: UInt64
    )? {
        try PushRecords.failure(of: sendSeq, instance: instance, txn: txn, schema: schema)
    }
}
