import Crypto
import Dispatch
import LedgerCore

/// Encodes and chains a large transaction's events, and hashes the Merkle tree's subtrees they complete, on
/// a queue of its own while the writer decides and folds the next events (``TransactionSink``).
///
/// Why: SHA-256 for the chain and the tree, and the encoding, were about a quarter of the writer thread's
/// samples under batchAdd, and the writer is the serial part; the other core had room. A diagnostic build
/// without the chain's and the tree's hashing did 15 % more batchAdd requests per second
/// (docs/performance.md, eleventh pass).
///
/// The events arrive in seq order, in chunks; the queue is serial, so they are chained in that order. The
/// smallest stored subtree (``MerkleStore/lowestStoredWidth`` leaves) is hashed here when all its leaves are
/// in this transaction; the one the transaction began inside of is left to the writer, which reads its
/// earlier leaves from the log. Nothing here touches LMDB: the writer puts everything after ``finish()``.
///
/// - Note: Thread-safe by confinement: the state is touched only on `queue` until ``finish()`` has waited
///   for it, and then only by the writer.
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

    private let queue = DispatchQueue(label: "ledger-chain")
    private let firstSeq: UInt64
    /// ``Output/beganInside``.
    private let beganInside: UInt64?
    /// The first seq whose subtree is hashed here: the transaction's first, or the one after `beganInside`.
    private let firstWhole: UInt64
    /// What the submitted events have made so far.
    private var made: Progress

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
    init(chainingFrom hash: [UInt8], firstSeq: UInt64) {
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
        queue.async { [self] in chain(events) }
    }

    /// Waits for every submitted event, and hands over what was made of them.
    func finish() -> Output {
        queue.sync {}
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
