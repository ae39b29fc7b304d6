import Crypto
import Foundation
import LMDBKit
import LedgerCore

/// Folds a whole log into fresh projections with the shared ``EventFold``: in memory first
/// (``BulkProjection``), then written in key order.
///
/// Used by `rebuild` (into the ledger's own, cleared projections) and by `verify` (into a scratch environment).
enum ProjectionBuilder {
    /// How often progress is reported while folding.
    static let progressStep: UInt64 = 100_000
    /// Events per batch handed from the reading thread to the folding one.
    static let batchSize = 4096

    /// Folds events `1...through` read through `snapshot` into projections held in memory; the caller writes
    /// them (``BulkProjection/write(to:schema:)``) once its read transaction has ended, so that the write may
    /// grow the map (which waits for every transaction of the process).
    ///
    /// Two threads: one walks the log and decodes (its own thread, holding `snapshot` alone until it is
    /// joined), the caller's folds; decoding and folding cost about the same, so a rebuild takes roughly
    /// the longer of the two rather than their sum. The Merkle tree (``MerkleBuilder``) is shared between
    /// them the same way: the reader hashes each chain hash into its leaf, the folding thread combines the
    /// leaves into the tree. The writing that follows is sequential.
    static func fold(
        from snapshot: LedgerSnapshot, through: UInt64, progress: (UInt64, UInt64) -> Void = { _, _ in }
    ) throws -> BulkProjection {
        var projection = BulkProjection()
        var expected: UInt64 = 1
        let handoff = BatchHandoff<FoldItem>(capacity: 8)
        let reader = SnapshotBox(snapshot)
        let readerDone = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            defer { readerDone.signal() }
            do {
                var batch: [FoldItem] = []
                batch.reserveCapacity(batchSize)
                try reader.snapshot.forEachEvent(from: 1, through: through) { event, hash in
                    batch.append(FoldItem(event: event, leaf: MerkleHash.leaf(hash)))
                    if batch.count == batchSize {
                        guard handoff.put(batch) else { return false }
                        // Reuse a folded batch: its events are freed here, on this thread, not the folding one.
                        batch = handoff.takeReturned() ?? []
                        batch.removeAll(keepingCapacity: true)
                        batch.reserveCapacity(batchSize)
                    }
                    return true
                }
                _ = handoff.put(batch)
                handoff.finish(nil)
            } catch {
                handoff.finish(error)
            }
        }
        // The snapshot's transaction belongs to the reader until it has finished.
        defer {
            handoff.cancel()
            readerDone.wait()
        }
        while let batch = try handoff.take() {
            defer { handoff.giveBack(batch) }
            for item in batch {
                let event = item.event
                guard event.seq == expected else {
                    throw StoreError(.corrupt, "the log has no event at seq \(expected)")
                }
                try EventFold.apply(event, to: &projection)
                projection.merkle.add(leaf: item.leaf)
                if expected % progressStep == 0 { progress(expected, through) }
                expected += 1
            }
        }
        guard expected == through + 1 else {
            throw StoreError(.corrupt, "the log ends at seq \(expected - 1), before its head \(through)")
        }
        return projection
    }
}

/// Hands `snapshot` to the reading thread of ``ProjectionBuilder/fold``.
private final class SnapshotBox: @unchecked Sendable {
    // @unchecked: only the reading thread touches the snapshot until the caller has waited for it to finish.
    let snapshot: LedgerSnapshot
    init(_ snapshot: LedgerSnapshot) { self.snapshot = snapshot }
}

/// An event decoded by the reading thread, with its Merkle leaf hash.
private struct FoldItem: @unchecked Sendable {
    // @unchecked: `SHA256Digest` is 32 bytes held inline, with no reference inside; swift-crypto does not
    // declare it Sendable.
    var event: LedgerEvent
    var leaf: SHA256Digest
}

/// A bounded queue of batches from one producing thread to one consuming thread.
final class BatchHandoff<Element: Sendable>: @unchecked Sendable {
    // @unchecked: every field is only touched with `condition` locked.
    private let condition = NSCondition()
    private let capacity: Int
    private var batches: [[Element]] = []
    private var returned: [[Element]] = []
    private var finished = false
    private var cancelled = false
    private var failure: Error?

    init(capacity: Int) { self.capacity = capacity }

    /// Waits for room and queues `batch`; `false` once the consumer has cancelled.
    func put(_ batch: [Element]) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while batches.count >= capacity && !cancelled { condition.wait() }
        guard !cancelled else { return false }
        batches.append(batch)
        condition.broadcast()
        return true
    }

    /// The consumer is done with `batch`; the producer may reuse it (and free its elements) — see
    /// ``takeReturned()``. Batches the producer never takes back are freed with the handoff.
    func giveBack(_ batch: [Element]) {
        condition.lock()
        defer { condition.unlock() }
        if returned.count < capacity { returned.append(batch) }
    }

    /// A batch the consumer gave back, if any.
    func takeReturned() -> [Element]? {
        condition.lock()
        defer { condition.unlock() }
        return returned.popLast()
    }

    /// The producer is done; `error` is rethrown to the consumer after the queued batches.
    func finish(_ error: Error?) {
        condition.lock()
        defer { condition.unlock() }
        finished = true
        failure = error
        condition.broadcast()
    }

    /// The consumer stops taking: a waiting producer is released.
    func cancel() {
        condition.lock()
        defer { condition.unlock() }
        cancelled = true
        condition.broadcast()
    }

    /// The next batch, `nil` at the end; throws the producer's error.
    func take() throws -> [Element]? {
        condition.lock()
        defer { condition.unlock() }
        while batches.isEmpty && !finished { condition.wait() }
        if !batches.isEmpty {
            condition.broadcast()
            return batches.removeFirst()
        }
        if let failure { throw failure }
        return nil
    }
}

extension Ledger {
    /// Clears every projection and folds the whole log into them again.
    ///
    /// Needs the writer lock (open the ledger read-write); while it runs, readers are told projections are
    /// being rebuilt, and a rebuild that stops half-way is detected and must be run again.
    ///
    /// - Parameter progress: called now and then with (events done, events in all).
    /// - Returns: the number of events folded.
    @discardableResult
    public func rebuildProjections(progress: (UInt64, UInt64) -> Void = { _, _ in }) throws -> UInt64 {
        guard options.mode == .readWrite else {
            throw StoreError(.invalidArgument, "rebuild needs the ledger open for writing (exclusive access)")
        }
        let schema = self.schema
        let total = try environment.write { txn in
            let head = try LedgerSnapshot(txn: txn, schema: schema).head()
            for database in schema.projections { try txn.clear(database) }
            try txn.put(schema.meta, key: MetaKey.rebuildingThrough, value: UInt64(0))
            return head.seq
        }
        progress(0, total)
        let projection = try environment.read { txn in
            try ProjectionBuilder.fold(
                from: LedgerSnapshot(txn: txn, schema: schema), through: total, progress: progress)
        }
        try projection.write(to: environment, schema: schema)
        progress(total, total)
        try environment.write { txn in _ = try txn.delete(schema.meta, key: MetaKey.rebuildingThrough) }
        logger.info("rebuilt projections", metadata: ["ledger.events": "\(total)"])
        return total
    }
}
