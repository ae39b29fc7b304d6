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
/// a slice of whole instances' entries, in key order and going round the instances, into `instanceTopics`
/// within the same transaction, so each instance's page is written once per round rather than once per
/// commit. Both trees are read as one (``LMDBProjection``, ``LedgerSnapshot``), and an entry is in exactly one
/// of them; what a rebuild or a bulk import writes goes straight to `instanceTopics`.
enum RecentMemberships {
    /// Once `recentInstanceTopics` holds `limit` entries or more, moves whole instances' entries into
    /// `instanceTopics`, a quarter of `limit` at a time (everything when `limit` is 0), going round the
    /// instances from `cursor`, until fewer than `limit` wait. Runs in the batch's write transaction, so a move
    /// commits with the batch or not at all.
    ///
    /// Moving a slice rather than everything keeps each commit's extra pages bounded (a move dirties a page or
    /// two per instance, and LMDB holds dirty pages in memory until the commit); going round means an
    /// instance waits a full round — about `limit` new memberships — between moves, so its page is written
    /// once for all the entries it gathered.
    ///
    /// - Returns: the number of entries moved.
    @discardableResult
    static func moveIfFull(txn: LMDBTransaction, schema: LedgerSchema, limit: Int, cursor: MoveCursor) throws -> Int {
        var waiting = try txn.count(schema.recentInstanceTopics)
        let slice = limit == 0 ? waiting : max(limit / 4, 1)
        var moved = 0
        while waiting > 0 && waiting >= limit {
            let count = try moveSlice(txn: txn, schema: schema, from: &cursor.next, atLeast: slice)
            guard count > 0 else { throw StoreError(.corrupt, "recentInstanceTopics counts entries it does not hold") }
            moved += count
            waiting -= count
        }
        return moved
    }

    /// Where the next move starts: the instance after the last one moved. Only the writer thread uses it; a
    /// position lost with an aborted transaction or a restart changes only which instances move first.
    final class MoveCursor: @unchecked Sendable {
        var next: InstanceID = 0
    }

    /// Moves every entry of whole instances, in key order from the first instance at or after `start`
    /// (going on from the first instance when the end is reached), until at least `minimum` entries have moved
    /// or none is left; `start` becomes the instance after the last one moved.
    ///
    /// Each instance's entries are put in one call (`MDB_MULTIPLE`: one search for the instance, where a put
    /// per entry searched for it each time), and its key deleted from `recentInstanceTopics` once.
    private static func moveSlice(
        txn: LMDBTransaction, schema: LedgerSchema, from start: inout InstanceID, atLeast minimum: Int
    ) throws -> Int {
        // The entries' values laid end to end, and where each instance's run begins.
        var values: [UInt8] = []
        var runs: [(instance: InstanceID, start: Int)] = []
        var count = 0
        func collect(from first: InstanceID, below end: InstanceID?) throws {
            try txn.withCursor(schema.recentInstanceTopics) { cursor in
                try cursor.forEach(from: first) { entry in
                    guard entry.key.count == 4, entry.value.count == StoredMembership.size else {
                        throw StoreError(.corrupt, "recentInstanceTopics holds an entry of the wrong size")
                    }
                    let instance = entry.key.loadBigEndianUInt32()
                    if let end, instance >= end { return false }
                    if runs.last?.instance != instance {
                        // Only whole instances: stop where the next one begins.
                        if count >= minimum { return false }
                        runs.append((instance, values.count))
                    }
                    values.append(contentsOf: entry.value)
                    count += 1
                    return true
                }
            }
        }
        try collect(from: start, below: nil)
        if count < minimum && start > 0 { try collect(from: 0, below: start) }
        guard let last = runs.last?.instance else { return 0 }
        let cursor = try txn.cursor(schema.instanceTopics)
        try values.withUnsafeBytes { values in
            for (index, run) in runs.enumerated() {
                let end = index + 1 < runs.count ? runs[index + 1].start : values.count
                do {
                    try cursor.putDuplicates(
                        run.instance, values: UnsafeRawBufferPointer(rebasing: values[run.start..<end]),
                        valueSize: StoredMembership.size, flags: .noDuplicateData)
                } catch let error as LMDBError where error.code == .keyExists {
                    throw StoreError(.corrupt, "instance \(run.instance) holds a membership on both of its sides")
                }
                try txn.delete(schema.recentInstanceTopics, key: run.instance)
            }
        }
        start = last == .max ? 0 : last + 1
        return count
    }
}
