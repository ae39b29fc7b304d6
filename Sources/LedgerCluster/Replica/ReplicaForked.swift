import LedgerStore

/// A replica's history is not the cluster's (a seq past the tail, or one the cluster's next block does not
/// follow): its copy is kept aside and replaced by a peer's.
struct ReplicaForked: Error, CustomStringConvertible {
    let head: UInt64
    let reason: String
    var description: String { reason }

    /// The replica holds seqs past the cluster's tail.
    static func pastTail(head: UInt64, tail: UInt64) -> Self {
        Self(head: head, reason: "this replica holds seqs through \(head), past the cluster's tail \(tail) (a fork)")
    }

    /// The cluster's block after the head does not follow the head's hash.
    static func notFollowed(head: UInt64) -> Self {
        Self(head: head, reason: "the cluster's seq \(head + 1) does not follow this replica's seq \(head) (a fork)")
    }

    /// At the tail's seq, another hash.
    static func headDiffers(head: UInt64, tail: ReplicationTail) -> Self {
        Self(head: head, reason: "this replica's head \(head) does not match the cluster's tail \(tail) (a fork)")
    }

    /// The head falls inside one of the cluster's commits (a replica applies whole commits).
    static func insideCommit(head: UInt64, of block: ReplicatedBlock) -> Self {
        Self(
            head: head,
            reason:
                "this replica's head \(head) is inside the cluster's commit of seqs \(block.firstSeq)…\(block.lastSeq) (a fork)"
        )
    }
}
