import Crypto
import LedgerCore

/// Encodes and chains a large transaction's events, and hashes the Merkle tree's subtrees they complete, on
/// the writer's chain worker (a ``SerialWorker`` of closures) while the writer decides and folds the next
/// events (``TransactionSink``).
///
/// Why: SHA-256 for the chain and the tree, and the encoding, were about a quarter of the writer thread's
/// samples under batchAdd, and the writer is the serial part; the other core had room. A diagnostic build
/// without the chain's and the tree's hashing did 15 % more batchAdd requests per second.
///
/// The events arrive in seq order, in chunks, each a job of the worker, which runs them in that order. The
/// chunks the worker has not begun when the writer calls ``finish()`` the writer takes back and chains itself,
/// after the one the worker is in: waiting for the worker's thread to get a core for each was a tenth of the
/// writer's time under batchAdd. The smallest stored subtree (``MerkleStore/lowestStoredWidth`` leaves) is
/// hashed here when all its leaves are in this transaction; the one the transaction began inside of is left
/// to the writer, which reads its earlier leaves from the log. Nothing here touches LMDB: the writer puts
/// everything after ``finish()``.
///
/// - Note: Thread-safe: the chain's state is touched by one thread at a time — by the worker, in the jobs it
///   runs in order, then by the writer in ``finish()``, once the job in hand has ended
///   (``SerialWorker/waitUntilIdle()``, whose lock orders the two).
final class EventChainer: @unchecked Sendable {
    // @unchecked: `made` and `chunksChainedByCaller` are touched as the note above says, one thread at a time.

    /// What the chainer made of the transaction's events.
    struct Output {
        /// The seq of the first event.
        let firstSeq: UInt64
        /// The chain hash of the last event.
        var hash: [UInt8]
        /// The log records (chain hash ‖ encoded event), laid end to end, of seqs `firstSeq…`.
        var records: [UInt8] = []
        /// Where each record ends in `records`.
        var ends: [Int] = []
        /// The smallest stored subtrees whose leaves are all in this transaction: the seq that completes
        /// each, and its hash, in seq order.
        var subtrees: [(completedAt: UInt64, hash: [UInt8])] = []
        /// The seq that completes the smallest stored subtree the transaction began inside of (after its first
        /// leaf), or `nil` when the transaction began a subtree: that one is the writer's to hash, from the
        /// log, if the transaction reaches its end.
        let beganInside: UInt64?
    }

    private let worker: SerialWorker<BlockingJob, Void>
    private let firstSeq: UInt64
    /// ``Output/beganInside``.
    private let beganInside: UInt64?
    /// The first seq whose subtree is hashed here: the transaction's first, or the one after `beganInside`.
    private let firstWhole: UInt64
    /// What the submitted events have made so far.
    private var made: Progress
    /// How many chunks ``finish()`` chained on the caller's thread (for tests).
    private(set) var chunksChainedByCaller = 0

    private struct Progress {
        var hash: [UInt8]
        var records: [UInt8] = []
        var ends: [Int] = []
        var subtrees: [(completedAt: UInt64, hash: [UInt8])] = []
        /// Leaf hashes of the subtree being filled, when it began in this transaction.
        var leaves: [SHA256Digest] = []
    }

    /// - Parameters:
    ///   - hash: the chain hash of the event before `firstSeq`.
    ///   - firstSeq: the seq of the first event that will be submitted.
    ///   - worker: the worker that chains the chunks; only this chainer queues jobs on it until ``finish()``.
    init(chainingFrom hash: [UInt8], firstSeq: UInt64, worker: SerialWorker<BlockingJob, Void>) {
        self.worker = worker
        self.firstSeq = firstSeq
        made = Progress(hash: hash)
        let width = MerkleStore.lowestStoredWidth
        beganInside = (firstSeq &- 1) % width == 0 ? nil : ((firstSeq &- 1) / width &+ 1) &* width
        firstWhole = beganInside.map { $0 &+ 1 } ?? firstSeq
        made.leaves.reserveCapacity(Int(MerkleStore.lowestStoredWidth))
    }

    /// Queues the next events, which follow the last ones submitted.
    func submit(_ events: [LedgerEvent]) {
        guard !events.isEmpty else { return }
        if !worker.enqueue({ [self] in chain(events) }) { chain(events) }
    }

    /// Hands over what was made of every submitted event. The chunks the worker has not begun are chained
    /// here, on the caller's thread, after the one it is chaining (if any): the caller, the writer, would
    /// otherwise wait for the worker's thread to be given a core for each of them.
    ///
    /// - Parameter beforeWaiting: runs once the chunks not begun are taken back (for tests).
    func finish(beforeWaiting: () -> Void = {}) -> Output {
        let left = worker.takeQueued()
        beforeWaiting()
        worker.waitUntilIdle()
        for job in left { job() }
        chunksChainedByCaller = left.count
        return Output(
            firstSeq: firstSeq, hash: made.hash, records: made.records, ends: made.ends, subtrees: made.subtrees,
            beganInside: beganInside)
    }

    private func chain(_ events: [LedgerEvent]) {
        // The state is moved into a local for the loop and back after it: every access to a class's stored
        // property is checked for exclusivity at run time, several per event, where a local's is checked by
        // the compiler.
        var made = Progress(hash: [])
        swap(&made, &self.made)
        defer { swap(&made, &self.made) }
        let width = MerkleStore.lowestStoredWidth
        for event in events {
            let start = made.records.count
            HashChain.appendRecord(of: event, chainingFrom: &made.hash, to: &made.records)
            made.ends.append(made.records.count)
            guard event.seq >= firstWhole else { continue }
            made.leaves.append(
                made.records.withUnsafeBytes {
                    MerkleHash.leaf(UnsafeRawBufferPointer(rebasing: $0[start..<(start + HashChain.hashSize)]))
                })
            if event.seq % width == 0 {
                made.subtrees.append((event.seq, MerkleStore.subtreeHash(leaves: made.leaves)))
                made.leaves.removeAll(keepingCapacity: true)
            }
        }
    }
}
