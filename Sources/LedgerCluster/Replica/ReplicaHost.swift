import LedgerCore
import LedgerStore

/// What a node's replicas need of the server that holds its ledgers, given to the ``ClusterNode`` when it is
/// made: each project's ledger, opened with the project's gate (``ReplicaGates``), and a way to replace one with
/// a peer's copy when etcd no longer holds what it lacks, or it forked.
public protocol ReplicaHost: Sendable {
    /// The open ledger of `project`, opened on first use.
    func ledger(for project: ProjectID) async throws -> Ledger

    /// Replaces `project`'s ledger with a consistent copy downloaded from the peer at `peerURL`. With
    /// `keepingAside`, the replaced copy is moved aside (a fork: evidence) rather than discarded.
    func reseed(_ project: ProjectID, fromPeer peerURL: String, keepingAside: Bool) async throws

    /// Removes `project`'s events after `seq` — a suffix committed ahead of etcd that etcd never took — and
    /// rebuilds its projections (``Ledger/rollBack(after:)``), while the replica follows (nothing else writes).
    func rollBack(_ project: ProjectID, after seq: UInt64) async throws
}
