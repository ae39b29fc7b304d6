import LedgerCore
import Logging

/// Replaces a project replica's ledger with a peer's copy when etcd cannot bring it up to date: the log was
/// trimmed past its head (``ReplicaBehind``), or it forked (``ReplicaForked``, whose copy is kept aside as
/// evidence). The copy comes from the live peer that has applied the most of the project, through the server
/// that holds the ledgers (``ReplicaHost/reseed(_:fromPeer:keepingAside:)``).
struct ReplicaReseeder: Sendable {
    let project: ProjectID
    let node: ClusterNodeContext
    let reporter: ReplicaReporter

    private var keys: ClusterKeys { node.keys }
    private var logger: Logger { node.logger }

    /// Replaces this replica's ledger with a consistent copy from the live peer that has applied the most of
    /// the project, at least through `seq` — keeping the replaced copy aside when it forked — after which the
    /// loop catches up from etcd again; marks the replica damaged, and waits, when no peer can give one.
    func reseed(because reason: String, fromPeerThrough seq: UInt64, head: UInt64, keepAside: Bool) async {
        do {
            let members = node.members
            let peers = try await node.etcd.appliedPositions(of: project, keys: keys).compactMap {
                peer, position -> (url: String, seq: UInt64)? in
                guard peer != node.nodeID, let url = members[peer], position.seq >= seq else { return nil }
                return (url, position.seq)
            }
            guard let peer = peers.max(by: { $0.seq < $1.seq }) else {
                throw EtcdError("no live peer has applied seq \(seq) of \(project)")
            }
            logger.warning(
                "re-seeding a replica from a peer's copy",
                metadata: [
                    "ledger.project": "\(project)", "cluster.peer": "\(peer.url)", "cluster.head": "\(head)",
                    "reason": "\(reason)",
                ])
            try await node.host.reseed(project, fromPeer: peer.url, keepingAside: keepAside)
            reporter.update { $0.damage = nil }
        } catch {
            _ = reporter.damaged("\(reason), and it could not be re-seeded: \(error)")
            try? await Task.sleep(for: .seconds(2))
        }
    }
}
