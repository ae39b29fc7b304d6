/// What a replicated ledger's writer must pass: the leader's side of replication. Two ways, one guarantee —
/// a request is answered success only once the cluster holds its events.
///
/// **In the transaction** (``replicate(_:)``): the writer calls it on its own thread, after every record of the
/// group commit is stored and before LMDB commits. If it returns, the block is durable elsewhere (a quorum of
/// etcd) and the transaction commits; if it throws, the transaction is aborted and every request in it fails
/// with nothing written here (the error is handed to them as it is when it is a ``ReplicationRefusal``). An
/// erasure always goes this way: what it rewrites cannot be rolled back.
///
/// **Ahead** (``commitsAhead``): the writer checks the block (``admitAhead(_:)``, in the transaction), commits
/// it, hands it over (``handOver(_:acknowledged:)``) and goes on to the next batch; the block's requests are
/// answered when the cluster acknowledges it. What LMDB holds past the cluster's tail is a Raft leader's
/// uncommitted suffix: nothing in it was acknowledged, and it is rolled back (``Ledger/rollBack(after:)``)
/// when the cluster refuses it or the node restarts ahead of the cluster (``MetaKey/clusterHeld``).
public protocol ReplicationGate: Sendable {
    /// Makes `block` durable in the cluster — or throws. Blocks the writer's thread until then.
    func replicate(_ block: ReplicatedBlock) throws
    /// Throws unless this node still leads the ledger's project: called instead of ``replicate(_:)`` for a
    /// batch that appended nothing, so that a deposed leader does not answer even a no-op.
    func confirmLeadership() throws
    /// Whether batches (but erasures) commit ahead of the cluster.
    var commitsAhead: Bool { get }
    /// In the write transaction of a batch that commits ahead: throws a refusal unless this node leads and
    /// `block` follows the last block handed over (an empty block: only the leadership is checked). Returns the
    /// seq through which the cluster is known to hold the log, which the transaction stores
    /// (``MetaKey/clusterHeld``).
    func admitAhead(_ block: ReplicatedBlock) throws -> UInt64
    /// Once LMDB committed `block` (admitted by ``admitAhead(_:)``): writes it to the cluster in order with the
    /// blocks handed over before it. `acknowledged` is called once: with `nil` when the cluster holds it, else
    /// with why not (every later block is then refused as well).
    func handOver(_ block: ReplicatedBlock, acknowledged: @escaping @Sendable (ReplicationRefusal?) -> Void)
    /// A batch admitted ahead failed in LMDB (a full disk): this node cannot write its project's log, and another
    /// holder should lead.
    func commitFailed(_ error: any Error)
}

extension ReplicationGate {
    public var commitsAhead: Bool { false }

    public func admitAhead(_ block: ReplicatedBlock) throws -> UInt64 {
        throw ReplicationRefusal(.clusterUnavailable, "this gate does not commit ahead of the cluster")
    }

    public func handOver(_ block: ReplicatedBlock, acknowledged: @escaping @Sendable (ReplicationRefusal?) -> Void) {
        acknowledged(ReplicationRefusal(.clusterUnavailable, "this gate does not commit ahead of the cluster"))
    }

    public func commitFailed(_ error: any Error) {}
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
