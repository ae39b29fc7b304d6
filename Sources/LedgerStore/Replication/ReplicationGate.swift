/// What a replicated ledger's writer must pass before it commits: the leader's side of replication.
///
/// The writer calls it on its own thread, inside the write transaction, after every record of the group
/// commit is stored and before LMDB commits. If it returns, the block is durable elsewhere (a quorum of etcd)
/// and the transaction commits; if it throws, the transaction is aborted and every request in it fails with
/// nothing written here (the error is handed to them as it is when it is a ``ReplicationRefusal``). So the
/// ledger never holds, nor acknowledges, what the cluster did not accept.
public protocol ReplicationGate: Sendable {
    /// Makes `block` durable in the cluster — or throws. Blocks the writer's thread until then.
    func replicate(_ block: ReplicatedBlock) throws
    /// Throws unless this node still leads the ledger's project: called instead of ``replicate(_:)`` for a
    /// batch that appended nothing, so that a deposed leader does not answer even a no-op.
    func confirmLeadership() throws
}

/// Why a replicated write was refused: not this node's to write (not the leader, or deposed), or the cluster
/// could not be reached in time. Nothing was written.
public struct ReplicationRefusal: Error, Sendable, CustomStringConvertible {
    public enum Reason: Sendable, Equatable {
        /// Another node leads the project, or none does right now.
        case notLeader
        /// The log's tail in the cluster is not the one this node extends: it must catch up first.
        case staleTail
        /// etcd did not answer (or refused) in time.
        case clusterUnavailable
    }

    public let reason: Reason
    public let message: String

    public init(_ reason: Reason, _ message: String) {
        self.reason = reason
        self.message = message
    }

    public var description: String { message }
}
