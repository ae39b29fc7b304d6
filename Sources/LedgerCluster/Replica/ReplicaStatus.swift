import LedgerCore

/// What a project's replica last knew of itself, for status and routing.
struct ReplicaStatus: Sendable {
    var appliedSeq: UInt64 = 0
    var headHash: [UInt8] = HashChain.genesis
    /// The node leading the project, as last seen in etcd.
    var leader: String?
    /// Why this replica cannot follow the log (a fork, or a log trimmed past its head), or `nil`.
    var damage: String?
    /// Whether it has caught up with etcd once since it started: until then its reads would be as old as the
    /// node's downtime, and the node serves them from the leader.
    var caughtUp = false
    /// Why this replica could not be written (a full disk), or `nil`: it falls behind, gives up any leadership
    /// and tries again; the node serves its reads from the leader until it has caught up.
    var stalled: String?
    /// What it has applied against where the cluster's log ends, and when it last moved.
    var progress = ReplicaProgress(at: .now)

    /// The replica's state now (``ReplicaProgress/State``).
    var replicaState: ReplicaProgress.State {
        progress.state(at: .now, damage: damage, storageFailure: stalled)
    }
}
