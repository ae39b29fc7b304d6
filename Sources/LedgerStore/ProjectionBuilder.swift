import Foundation
import LMDBKit
import LedgerCore
import Logging

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
    /// Three threads: the caller's walks the log and decodes, a ``SerialWorker`` folds the batches it hands
    /// over, and a third builds the Merkle tree from the chain hashes (``MerkleTreeWorker``). The tree's
    /// thread may still be hashing when this returns: ``BulkProjection/write(to:schema:)`` waits for it only
    /// before writing the tree, last, so its work overlaps the writing of the projections, which is otherwise
    /// sequential.
    static func fold(
        from snapshot: LedgerSnapshot, through: UInt64, progress: (UInt64, UInt64) -> Void = { _, _ in }
    ) throws -> BulkProjection {
        let folder = SerialWorker<[LedgerEvent], FoldState>(
            name: "ledger-fold", state: FoldState(), capacity: 8, recyclesJobs: true
        ) { state, batches in
            for batch in batches {
                for event in batch {
                    guard event.seq == state.expected else {
                        throw StoreError(.corrupt, "the log has no event at seq \(state.expected)")
                    }
                    try EventFold.apply(event, to: &state.projection)
                    state.expected += 1
                }
            }
        }
        let tree = MerkleTreeWorker()
        var read: UInt64 = 0
        do {
            var batch: [LedgerEvent] = []
            batch.reserveCapacity(batchSize)
            var hashes: [ChainHash] = []
            hashes.reserveCapacity(batchSize)
            try snapshot.forEachEvent(from: 1, through: through) { event, hash in
                batch.append(event)
                hashes.append(ChainHash(hash))
                read += 1
                if read % progressStep == 0 { progress(read, through) }
                if batch.count == batchSize {
                    guard folder.enqueue(batch), tree.add(hashes) else { return false }
                    // Reuse a folded batch: its events are freed here, on this thread, not the folding one.
                    batch = folder.takeReturned() ?? []
                    batch.removeAll(keepingCapacity: true)
                    batch.reserveCapacity(batchSize)
                    hashes = tree.takeReturned()
                }
                return true
            }
            _ = folder.enqueue(batch)
            _ = tree.add(hashes)
        } catch {
            folder.cancel()
            tree.cancel()
            throw error
        }
        let folded: FoldState
        do {
            folded = try folder.finish()
        } catch {
            tree.cancel()
            throw error
        }
        guard folded.expected == through + 1 else {
            tree.cancel()
            throw StoreError(.corrupt, "the log ends at seq \(folded.expected - 1), before its head \(through)")
        }
        var projection = folded.projection
        projection.tree = tree
        return projection
    }

    /// What the folding worker keeps: the projections so far and the seq it expects next.
    private struct FoldState {
        var projection = BulkProjection()
        var expected: UInt64 = 1
    }
}

/// A chain hash (32 bytes) copied out of the log for the tree's thread.
struct ChainHash: Sendable {
    private var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)

    init(_ bytes: UnsafeRawBufferPointer) {
        withUnsafeMutableBytes(of: &words) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes.prefix(32))) }
    }

    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R { Swift.withUnsafeBytes(of: words, body) }
}

/// Builds the Merkle tree of a fold on a ``SerialWorker`` of its own, from the chain hashes handed to it in
/// seq order. The tree (two SHA-256 per event, about 200 ns each through swift-crypto here) is the largest
/// single cost of a rebuild; on its own thread it keeps working while the projections are written, which
/// otherwise leaves a core idle.
///
/// The thread runs at a lower priority (nice +10, for this thread only) with a deep queue (256 batches,
/// at most 32 MiB of hashes): while the log is read and folded it takes the CPU the other two leave, and it
/// catches up during the write. At normal priority it took an equal share from the reader and the folder,
/// and the write then ran on one core with the tree already done (1.65M events: about 560k/s against
/// 650k/s niced).
///
/// - Note: Thread-safe. Dropping it cancels the tree's thread and waits for it.
final class MerkleTreeWorker: Sendable {
    private let worker = SerialWorker<[ChainHash], MerkleBuilder>(
        name: "ledger-tree", state: MerkleBuilder(), capacity: 256, niceness: 10, recyclesJobs: true
    ) { builder, batches in
        for batch in batches {
            for hash in batch { hash.withUnsafeBytes { builder.add(chainHash: $0) } }
        }
    }

    /// Queues the next chain hashes, in seq order; `false` once cancelled.
    func add(_ hashes: [ChainHash]) -> Bool { hashes.isEmpty || worker.enqueue(hashes) }

    /// An emptied batch to fill again.
    func takeReturned() -> [ChainHash] {
        var batch = worker.takeReturned() ?? []
        batch.removeAll(keepingCapacity: true)
        batch.reserveCapacity(ProjectionBuilder.batchSize)
        return batch
    }

    /// Waits for the tree's thread to hash everything queued, and returns the tree.
    func finish() -> MerkleBuilder {
        // The work never throws.
        (try? worker.finish()) ?? MerkleBuilder()
    }

    /// Stops the tree's thread (what is queued is dropped) and waits for it.
    func cancel() { worker.cancel() }
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
