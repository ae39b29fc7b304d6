import LMDBKit
import Synchronization
import LedgerCore
import Logging

extension Ledger {
    /// Removes the events after `seq` — what this node committed ahead of its cluster and the cluster never
    /// took (``ReplicationGate/commitsAhead``) — and rebuilds the projections from the log that is left.
    ///
    /// Refuses, changing nothing, unless the ledger marks everything after `seq` as written ahead
    /// (``MetaKey/clusterHeld`` at or below `seq`): a suffix a node acknowledged on its own, or a copy from
    /// elsewhere, is a fork to keep aside, never to drop. Needs the ledger open for writing; runs on the
    /// caller's thread while nothing else may write (a cluster's replica that follows: its writer's transactions
    /// are refused). Readers are told the projections are being rebuilt meanwhile, and the writer's facts are
    /// forgotten, as after any transaction not its own (``WriterInstanceCache/begin(transaction:)``).
    ///
    /// A roll-back in progress is announced (``isRollingBack``) so that a server can hold its requests until it
    /// ends (``waitForRollBack(upTo:)``) instead of answering them from projections being rebuilt.
    ///
    /// - Parameter progress: called now and then with (events folded, events in all) while the projections are
    ///   rebuilt.
    /// - Returns: how many events were removed.
    public func rollBack(after seq: UInt64, progress: (UInt64, UInt64) -> Void = { _, _ in }) throws -> UInt64 {
        guard options.mode == .readWrite else {
            throw StoreError(.invalidArgument, "a roll-back needs the ledger open for writing (exclusive access)")
        }
        let ticket = rollBacks.begin()
        defer { rollBacks.end(ticket) }
        let schema = self.schema
        let removed = try environment.write { txn -> UInt64 in
            let snapshot = try LedgerSnapshot(txn: txn, schema: schema)
            let head = try snapshot.head()
            guard head.seq > seq else { return 0 }
            let held = try txn.withValue(in: schema.meta, forKey: MetaKey.clusterHeld) {
                $0?.loadBigEndianUInt64()
            }
            guard let held, held <= seq else {
                throw StoreError(
                    .corrupt,
                    "seqs \(seq + 1)…\(head.seq) of \(project) were not written ahead of the cluster (it held seq "
                        + "\(held.map(String.init) ?? "none")): they are a fork, not an unacknowledged suffix")
            }
            var newHead = LedgerHead.empty
            if seq > 0 {
                guard let record = try txn.value(in: schema.log, forKey: seq),
                    let event = try snapshot.event(at: seq)
                else { throw StoreError(.corrupt, "seq \(seq) of \(project) is not in its log") }
                newHead = LedgerHead(seq: seq, time: event.time, hash: Array(record.prefix(HashChain.hashSize)))
            }
            for removed in (seq + 1)...head.seq { _ = try txn.delete(schema.log, key: removed) }
            try txn.put(schema.meta, key: MetaKey.head, value: newHead.encoded)
            _ = try txn.delete(schema.meta, key: MetaKey.clusterHeld)
            return head.seq - seq
        }
        guard removed > 0 else { return 0 }
        try rebuildProjections(progress: progress)
        logger.warning(
            "rolled back events this node committed ahead of its cluster, which the cluster did not take",
            metadata: ["ledger.project": "\(project)", "ledger.head": "\(seq)", "ledger.removed": "\(removed)"])
        return removed
    }

    /// Whether a roll-back (``rollBack(after:progress:)``) is running: readers would be told the projections are
    /// being rebuilt.
    public var isRollingBack: Bool { rollBacks.isRunning }

    /// Returns once no roll-back runs (at once when none does): `true`, or `false` after `timeout`.
    public func waitForRollBack(upTo timeout: Duration) async -> Bool {
        await rollBacks.waitUntilIdle(upTo: timeout)
    }
}

/// The roll-backs of one ledger, begun and ended, for those waiting until none runs.
///
/// - Note: Thread-safe.
final class RollBackWatch: Sendable {
    private let begun = Mutex<UInt64>(0)
    private let ended = Watermark()

    /// Marks a roll-back begun; its ticket is handed to ``end(_:)``.
    func begin() -> UInt64 {
        begun.withLock { count in
            count += 1
            return count
        }
    }

    /// Marks the roll-back with `ticket` (and every one begun before it) ended.
    func end(_ ticket: UInt64) { ended.advance(to: ticket) }

    var isRunning: Bool { begun.withLock { $0 } > ended.level }

    func waitUntilIdle(upTo timeout: Duration) async -> Bool {
        let last = begun.withLock { $0 }
        guard last > ended.level else { return true }
        return await ended.wait(for: last, upTo: timeout)
    }
}
