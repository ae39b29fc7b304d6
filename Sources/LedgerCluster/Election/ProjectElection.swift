import EtcdAPI
import LedgerCore
import Logging

/// One project's election in etcd, cut as etcd's own `concurrency.Election` (election.go): the leader's key,
/// created under this node's lease by the campaign that wins; resigning deletes it; observing returns when it
/// goes; and every write a leader makes is a transaction fenced on the key's create revision.
struct ProjectElection: Sendable {
    /// The leader etcd holds now.
    struct Leader: Sendable {
        /// The leading node's id.
        let nodeID: String
        /// The election key's create revision: the leadership's fence.
        let revision: Int64
        /// The lease the key hangs on.
        let lease: Int64
    }

    let project: ProjectID
    private let node: ClusterNodeContext

    init(project: ProjectID, node: ClusterNodeContext) {
        self.project = project
        self.node = node
    }

    private var key: String { node.keys.leader(project) }
    private var logger: Logger { node.logger }

    /// The project's leader now, or `nil` when no node leads it.
    func leader() async throws -> Leader? {
        guard let value = try await node.etcd.get(key).value else { return nil }
        return Leader(
            nodeID: String(decoding: value.value, as: UTF8.self), revision: value.createRevision, lease: value.lease)
    }

    /// Whether `leader` is this node under its current lease (not a key left by its previous process).
    func isThisNode(_ leader: Leader) -> Bool {
        leader.nodeID == node.nodeID && leader.lease == node.currentLease()
    }

    /// Creates the election key under this node's lease if no one holds it; the key's create revision when this
    /// node won, `nil` when another did.
    func campaign() async throws -> Int64? {
        var request = Etcdserverpb_TxnRequest()
        request.compare = [.createRevision(of: key, equals: 0)]
        request.success = [.put(key, Array(node.nodeID.utf8), lease: node.currentLease())]
        let response = try await node.etcd.txn(request)
        guard response.succeeded else { return nil }
        logger.notice("this node leads project", metadata: ["ledger.project": "\(project)"])
        return response.header.revision
    }

    /// Deletes the election key created at `revision`, fenced on it, so that another holder campaigns at once
    /// rather than when this node's lease would expire — which, the node being alive, it never would.
    func resign(revision: Int64) async {
        let request = fenced(revision, [.deleteRange(key, rangeEnd: [])])
        if (try? await node.etcd.txn(request))?.succeeded == true {
            logger.notice("this node gave up leading project", metadata: ["ledger.project": "\(project)"])
        }
    }

    /// Resigns if this node holds the election key, whatever its lease.
    func resignIfHeld() async {
        guard let leader = try? await leader(), leader.nodeID == node.nodeID else { return }
        await resign(revision: leader.revision)
    }

    /// Returns when the election key created at `revision` is gone or replaced, watching from revision `start`.
    func observe(revision: Int64, from start: Int64) async throws {
        // The key may have gone between the campaign and the watch's start.
        guard try await node.etcd.get(key).value?.createRevision == revision else { return }
        for try await response in node.etcd.watch(prefix: key, fromRevision: start)
        where response.events.contains(where: { $0.type == .delete || $0.kv.createRevision != revision }) {
            break
        }
        try Task.checkCancellation()
        logger.notice("this node no longer leads project", metadata: ["ledger.project": "\(project)"])
    }

    /// A transaction of `operations` that lands only while the election key is the one created at `revision`
    /// (and `extra` holds): the fence of every write a leader makes.
    func fenced(
        _ revision: Int64, _ operations: [Etcdserverpb_RequestOp], alsoIf extra: [Etcdserverpb_Compare] = []
    ) -> Etcdserverpb_TxnRequest {
        var request = Etcdserverpb_TxnRequest()
        request.compare = [.createRevision(of: key, equals: revision)] + extra
        request.success = operations
        return request
    }
}
