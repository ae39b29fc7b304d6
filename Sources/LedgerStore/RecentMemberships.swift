import LMDBKit
import LedgerCore

/// The instance side of new memberships waits in `recentInstanceTopics` and moves to `instanceTopics` in
/// batches.
///
/// Each membership is stored twice: under its topic (`topicMembers`, where a batch's members sit side by side)
/// and under its instance. A `batchAdd` of 1,000 tokens touches 1,000 instances spread over the whole
/// instance side, and LMDB copies and writes every page it changes: one 4 KiB page per instance per commit,
/// 5.7 MB written per request (docs/performance.md, "seventh pass"). New memberships therefore go to a small
/// tree, whose few pages every commit rewrites anyway; once it holds
/// `LedgerLimits.recentMembershipsBeforeMove` entries (65,536 by default, 768 KiB of values) the writer moves
/// them all, in key order, into `instanceTopics` within the same transaction, so each instance's page is
/// written once per move rather than once per commit. Both trees are read as one (``LMDBProjection``,
/// ``LedgerSnapshot``), and an entry is in exactly one of them; what a rebuild or a bulk import writes goes
/// straight to `instanceTopics`.
enum RecentMemberships {
    /// Moves every entry of `recentInstanceTopics` into `instanceTopics` when there are at least `limit`.
    /// Runs in the batch's write transaction, so the move commits with the batch or not at all.
    ///
    /// - Returns: the number of entries moved (0 when under the limit).
    @discardableResult
    static func moveIfFull(txn: LMDBTransaction, schema: LedgerSchema, limit: Int) throws -> Int {
        guard try txn.count(schema.recentInstanceTopics) >= limit else { return 0 }
        return try move(txn: txn, schema: schema)
    }

    /// Moves every entry of `recentInstanceTopics` into `instanceTopics`, in key order.
    static func move(txn: LMDBTransaction, schema: LedgerSchema) throws -> Int {
        var entries: [(instance: InstanceID, value: [UInt8])] = []
        try txn.withCursor(schema.recentInstanceTopics) { cursor in
            try cursor.forEach { entry in
                guard entry.key.count == 4, entry.value.count == StoredMembership.size else {
                    throw StoreError(.corrupt, "recentInstanceTopics holds an entry of the wrong size")
                }
                entries.append((entry.key.loadBigEndianUInt32(), Array(entry.value)))
                return true
            }
        }
        for entry in entries {
            guard try txn.put(schema.instanceTopics, key: entry.instance, value: entry.value, flags: .noDuplicateData)
            else { throw StoreError(.corrupt, "instance \(entry.instance) holds a membership on both of its sides") }
        }
        try txn.clear(schema.recentInstanceTopics)
        return entries.count
    }
}
