import EtcdAPI
import LedgerCore
import LedgerStore
import Logging

/// Tells why etcd cannot bring a project replica up to date — the log was trimmed past its head
/// (``ReplicaBehind``), or it forked (``ReplicaForked``, whose copy is kept aside as evidence) — and replaces its
/// ledger with a peer's copy. The copy comes from the live peer that has applied the most of the project, through the server
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

    /// Why no block of etcd's begins right after `head`: a block that holds `head + 1` (beginning before it)
    /// means the head is not where any of the cluster's commits ends — a fork (not yet marked: it may be a
    /// suffix to roll back, ``aheadOrForked(_:ledger:tail:revision:)``); otherwise the log was trimmed past it,
    /// and etcd's log begins at `firstHeld`.
    func behindOrForked(head: UInt64, firstHeld: UInt64, revision: Int64) async throws -> any Error {
        let before = try await node.etcd.range(
            keys.blocks(project), rangeEnd: Array(keys.block(project, firstSeq: head + 2).utf8), limit: 1,
            revision: revision, descending: true)
        if let kv = before.kvs.first {
            let block = try StoredBlock(decoding: kv.value).block
            if block.firstSeq <= head + 1, block.lastSeq >= head + 1 {
                return ReplicaForked.insideCommit(head: head, of: block)
            }
        }
        return ReplicaBehind(head: head, firstHeld: firstHeld)
    }

    /// Marks the replica damaged by `fork` (it is not served, and `/readyz` says so until a peer's copy replaces
    /// it) and returns the error to throw.
    func forked(_ fork: ReplicaForked) -> ReplicaForked {
        _ = reporter.damaged(fork.reason)
        return fork
    }
}
