import Foundation
import LMDBKit
import LedgerCore
import Logging

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
package final class MerkleTreeWorker: Sendable {
    package init() {}

    private let worker = SerialWorker<[ChainHash], MerkleBuilder>(
        name: "ledger-tree", state: MerkleBuilder(), capacity: 256, niceness: 10, recyclesJobs: true,
        batch: { _ in 1 }
    ) { builder, batches in
        for batch in batches {
            for hash in batch { hash.withUnsafeBytes { builder.add(chainHash: $0) } }
        }
    }

    /// Queues the next chain hashes, in seq order; `false` once cancelled.
    package func add(_ hashes: [ChainHash]) -> Bool { hashes.isEmpty || worker.enqueue(hashes) }

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
    package func cancel() { worker.cancel() }
}
