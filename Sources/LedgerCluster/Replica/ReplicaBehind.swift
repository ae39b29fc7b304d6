/// etcd no longer holds the blocks after a replica's head (trimmed): the replica must be seeded from a peer.
struct ReplicaBehind: Error, CustomStringConvertible {
    let head: UInt64
    /// The first seq etcd still holds.
    let firstHeld: UInt64

    var description: String {
        "the cluster's log was trimmed past this replica's head \(head) (etcd holds seqs from \(firstHeld))"
    }
}
