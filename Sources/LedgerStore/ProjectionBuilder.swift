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
    /// Events (and chain hashes) per batch handed from the reading thread to the folding (and tree) one.
    static let batchSize = 4096

    /// Folds events `1...through` read through `snapshot` into projections held in memory; the caller writes
    /// them (``BulkProjection/write(to:schema:)``) once its read transaction has ended, so that the write may
    /// grow the map (which waits for every transaction of the process).
    ///
    /// Three threads: one walks the log and decodes (its own thread, holding `snapshot` alone until it is
    /// joined), the caller's folds, and a third builds the Merkle tree from the chain hashes the reader
    /// hands it (``TreeBuilderThread``). The tree's thread may still be hashing when this returns:
    /// ``BulkProjection/write(to:schema:)`` waits for it only before writing the tree, last, so its work
    /// overlaps the writing of the projections, which is otherwise sequential.
    static func fold(
        from snapshot: LedgerSnapshot, through: UInt64, progress: (UInt64, UInt64) -> Void = { _, _ in }
    ) throws -> BulkProjection {
        var projection = BulkProjection()
        var expected: UInt64 = 1
        let handoff = BatchHandoff<LedgerEvent>(capacity: 8)
        let tree = TreeBuilderThread()
        let reader = SnapshotBox(snapshot)
        let readerDone = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            defer { readerDone.signal() }
            do {
                var batch: [LedgerEvent] = []
                batch.reserveCapacity(batchSize)
                var hashes: [ChainHash] = []
                hashes.reserveCapacity(batchSize)
                try reader.snapshot.forEachEvent(from: 1, through: through) { event, hash in
                    batch.append(event)
                    hashes.append(ChainHash(hash))
                    if batch.count == batchSize {
                        guard handoff.put(batch), tree.add(hashes) else { return false }
                        // Reuse a folded batch: its events are freed here, on this thread, not the folding one.
                        batch = handoff.takeReturned() ?? []
                        batch.removeAll(keepingCapacity: true)
                        batch.reserveCapacity(batchSize)
                        hashes = tree.takeReturned()
                    }
                    return true
                }
                _ = handoff.put(batch)
                _ = tree.add(hashes)
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
        do {
            while let batch = try handoff.take() {
                defer { handoff.giveBack(batch) }
                for event in batch {
                    guard event.seq == expected else {
                        throw StoreError(.corrupt, "the log has no event at seq \(expected)")
                    }
                    try EventFold.apply(event, to: &projection)
                    if expected % progressStep == 0 { progress(expected, through) }
                    expected += 1
                }
            }
        } catch {
            tree.cancel()
            throw error
        }
        guard expected == through + 1 else {
            tree.cancel()
            throw StoreError(.corrupt, "the log ends at seq \(expected - 1), before its head \(through)")
        }
        projection.tree = tree
        return projection
    }
}

/// Hands `snapshot` to the reading thread of ``ProjectionBuilder/fold``.
private final class SnapshotBox: @unchecked Sendable {
    // @unchecked: only the reading thread touches the snapshot until the caller has waited for it to finish.
    let snapshot: LedgerSnapshot
    init(_ snapshot: LedgerSnapshot) { self.snapshot = snapshot }
}

/// A chain hash (32 bytes) copied out of the log for the tree's thread.
struct ChainHash: Sendable {
    private var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)

    init(_ bytes: UnsafeRawBufferPointer) {
        withUnsafeMutableBytes(of: &words) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes.prefix(32))) }
    }

    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R { Swift.withUnsafeBytes(of: words, body) }
}

/// Builds the Merkle tree of a fold on a thread of its own, from the chain hashes the reading thread hands
/// it. The tree (two SHA-256 per event, about 200 ns each through swift-crypto here) is the largest single
/// cost of a rebuild; on its own thread it keeps working while the projections are written, which
/// otherwise leaves a core idle.
///
/// The thread runs at a lower priority (nice +10, for this thread only) with a deep queue (256 batches,
/// at most 32 MiB of hashes): while the log is read and folded it takes the CPU the other two leave, and it
/// catches up during the write. At normal priority it took an equal share from the reader and the folder,
/// and the write then ran on one core with the tree already done (1.65M events: about 560k/s against
/// 650k/s niced).
final class TreeBuilderThread: Sendable {
    private let state = State()

    /// What the tree's thread holds: dropping the ``TreeBuilderThread`` cancels and joins it.
    private final class State: @unchecked Sendable {
        // @unchecked: `builder` is touched only by the tree's thread until `done` is signalled, then only by
        // the caller of ``TreeBuilderThread/finish()``; `joined` only by the owner's thread.
        let handoff = BatchHandoff<ChainHash>(capacity: 256)
        var builder = MerkleBuilder()
        let done = DispatchSemaphore(value: 0)
        var joined = false
    }

    init() {
        Thread.detachNewThread { [state] in
            defer { state.done.signal() }
            // Linux keeps a nice value per thread; `who` 0 is the calling thread. Failing changes only speed.
            _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 10)
            while let batch = try? state.handoff.take() {
                for hash in batch { hash.withUnsafeBytes { state.builder.add(chainHash: $0) } }
                state.handoff.giveBack(batch)
            }
        }
    }

    /// Queues the next chain hashes, in seq order; `false` once cancelled.
    func add(_ hashes: [ChainHash]) -> Bool { hashes.isEmpty || state.handoff.put(hashes) }

    /// An emptied batch to fill again.
    func takeReturned() -> [ChainHash] {
        var batch = state.handoff.takeReturned() ?? []
        batch.removeAll(keepingCapacity: true)
        batch.reserveCapacity(ProjectionBuilder.batchSize)
        return batch
    }

    /// Waits for the tree's thread to hash everything queued, and returns the tree.
    func finish() -> MerkleBuilder {
        join()
        return state.builder
    }

    /// Stops the tree's thread (what is queued is dropped) and waits for it.
    func cancel() {
        state.handoff.cancel()
        join()
    }

    private func join() {
        guard !state.joined else { return }
        state.joined = true
        state.handoff.finish(nil)
        state.done.wait()
    }

    deinit { cancel() }
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

    /// The next batch, `nil` at the end or once cancelled; throws the producer's error.
    func take() throws -> [Element]? {
        condition.lock()
        defer { condition.unlock() }
        while batches.isEmpty && !finished && !cancelled { condition.wait() }
        if !batches.isEmpty && !cancelled {
            condition.broadcast()
            return batches.removeFirst()
        }
        if let failure, !cancelled { throw failure }
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
