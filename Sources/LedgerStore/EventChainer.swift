import Crypto
import Dispatch
import LedgerCore
import Synchronization

/// Encodes and chains a large transaction's events, and hashes the Merkle tree's subtrees they complete, on
/// a queue of its own while the writer decides and folds the next events (``TransactionSink``).
///
/// Why: SHA-256 for the chain and the tree, and the encoding, were about a quarter of the writer thread's
/// samples under batchAdd, and the writer is the serial part; the other core had room. A diagnostic build
/// without the chain's and the tree's hashing did 15 % more batchAdd requests per second
/// (docs/performance.md, eleventh pass).
///
/// The events arrive in seq order, in chunks; the queue is serial, so they are chained in that order. The chunks
/// the queue has not begun when the writer calls ``finish()`` the writer chains itself, after the one the queue
/// is in: waiting for the queue's thread to get a core for each was a tenth of the writer's time under batchAdd
/// (docs/performance.md, fourteenth pass). The smallest stored subtree (``MerkleStore/lowestStoredWidth``
/// leaves) is hashed here when all its leaves are in this transaction; the one the transaction began inside of
/// is left to the writer, which reads its earlier leaves from the log. Nothing here touches LMDB: the writer
/// puts everything after ``finish()``.
///
/// - Note: Thread-safe: the waiting chunks are behind a lock, and the chain's state is touched by one thread at
///   a time — on `queue` by the chunks it takes, then by the writer in ``finish()``, once the queue has finished
///   the chunk it took (`queue.sync`) or, between chunks, taken the lock after its last one.
final class EventChainer: @unchecked Sendable {
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

    private let queue: DispatchQueue
    /// The submitted chunks the queue has not begun, in order, and whether it is chaining one now.
    private let waiting = Mutex(Waiting())
    private let firstSeq: UInt64
    /// ``Output/beganInside``.
    private let beganInside: UInt64?
    /// The first seq whose subtree is hashed here: the transaction's first, or the one after `beganInside`.
    private let firstWhole: UInt64
    /// What the submitted events have made so far.
    private var made: Progress
    /// How many chunks ``finish()`` chained on the caller's thread (for tests).
    private(set) var chunksChainedByCaller = 0

    private struct Waiting {
        var chunks: [[LedgerEvent]] = []
        /// A drain is queued or running on `queue`.
        var draining = false
        /// The drain has taken a chunk and not yet asked for the next.
        var chaining = false
    }

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
    ///   - queue: a serial queue of its own (tests pass one they can hold up).
    init(chainingFrom hash: [UInt8], firstSeq: UInt64, queue: DispatchQueue = DispatchQueue(label: "ledger-chain")) {
        self.queue = queue
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
        let startDrain = waiting.withLock { waiting in
            waiting.chunks.append(events)
            defer { waiting.draining = true }
            return !waiting.draining
        }
        if startDrain { queue.async { [self] in drain() } }
    }

    /// Chains the waiting chunks in order until none is left.
    private func drain() {
        while let chunk = waiting.withLock({ waiting -> [LedgerEvent]? in
            guard !waiting.chunks.isEmpty else {
                waiting.draining = false
                waiting.chaining = false
                return nil
            }
            waiting.chaining = true
            return waiting.chunks.removeFirst()
        }) {
            chain(chunk)
        }
    }

    /// Hands over what was made of every submitted event. The chunks the queue has not begun are chained here,
    /// on the caller's thread, after the one it is chaining (if any): the caller, the writer, would otherwise
    /// wait for the queue's thread to be given a core for each of them.
    func finish() -> Output {
        let (left, chaining) = waiting.withLock { waiting in
            defer { waiting.chunks = [] }
            return (waiting.chunks, waiting.chaining)
        }
        // A chunk the queue took is chained there before the ones left; what it made is seen here through
        // `queue.sync` or, when it was between chunks, through the lock it took after its last one.
        if chaining { queue.sync {} }
        for chunk in left { chain(chunk) }
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
