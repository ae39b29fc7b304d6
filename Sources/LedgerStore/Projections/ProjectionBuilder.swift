import Foundation
import LMDBKit
import LedgerCore
import Logging

/// Folds a whole log into fresh projections with the shared ``EventFold``: in memory first
/// (``BulkProjection``), then written in key order.
///
/// Used by `rebuild` (into the ledger's own, cleared projections) and by `verify` (into a scratch environment).
package enum ProjectionBuilder {
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
    package static func fold(
        from snapshot: LedgerSnapshot, through: UInt64, progress: (UInt64, UInt64) -> Void = { _, _ in }
    ) throws -> BulkProjection {
        // One batch at a time: each comes back to the reader as soon as it is folded.
        let folder = SerialWorker<[LedgerEvent], FoldState>(
            name: "ledger-fold", state: FoldState(), capacity: 8, recyclesJobs: true, batch: { _ in 1 }
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
