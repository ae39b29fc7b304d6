import Crypto
import LMDBKit
import LedgerCore

extension LedgerSnapshot {
    /// The Merkle tree over the first `size` events (default: the whole log).
    public func merkleTree(size: UInt64? = nil) throws -> MerkleTree<LedgerMerkleNodes> {
        let headSeq = try self.head().seq
        let size = size ?? headSeq
        guard size <= headSeq else {
            throw StoreError(.notFound, "the log has \(headSeq) events; there is no tree of size \(size)")
        }
        return MerkleTree(size: size, source: LedgerMerkleNodes(txn: txn, schema: schema))
    }
}
