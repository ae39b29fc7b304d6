import EtcdAPI
import LedgerStore
import Logging
import SwiftProtobuf
import Synchronization

/// This node's session with etcd, as etcd's own `concurrency.Session` (session.go): a lease, this node's
/// membership records under it, and its keep-alive. When the lease is lost every key on it goes — the
/// membership and the node's election keys — and the session is opened again under a new lease.
///
/// - Note: Thread-safe.
final class EtcdSession: Sendable {
    private struct State {
        /// The lease the node's keys hang on (0 while there is none).
        var lease: Int64 = 0
        /// Why this node's membership could not be claimed again (``MembershipTaken``), or `nil`.
        var problem: String?
    }

    private let state = Mutex(State())
    private let configuration: ClusterConfiguration
    private let etcd: EtcdClient
    private let keys: ClusterKeys
    /// Raised when the lease is granted or lost: placement and routing depend on it.
    private let changes: Watermark
    private let logger: Logger

    init(configuration: ClusterConfiguration, etcd: EtcdClient, keys: ClusterKeys, routing: Watermark, logger: Logger) {
        self.configuration = configuration
        self.etcd = etcd
        self.keys = keys
        changes = routing
        self.logger = logger
    }

    /// The session's lease now; 0 while it has none.
    var lease: Int64 { state.withLock { $0.lease } }

    /// Why the membership could not be claimed (another live process holds it), or `nil`.
    var problem: String? { state.withLock { $0.problem } }

    /// How long a claim waits for a record left by this node's previous process to expire with its lease.
    private var patience: Duration { .seconds(2 * Int64(configuration.leaseSeconds) + 1) }

    /// How long a claim waits before it tries again when the watch for the holder's deletion failed (its etcd
    /// member went away): a failed watch is no notification, and trying again at once would grant a lease a turn.
    static let retryAfterFailedWatch: Duration = .milliseconds(250)

    /// Claims this node's id and advertise URL under a new lease (``ClusterNode/join()``).
    ///
    /// - Throws: ``MembershipTaken`` when a live process holds either; an etcd error when etcd does not answer.
    func open() async throws {
        let lease = try await claim()
        state.withLock { $0.lease = lease }
        changes.bump()
        logger.notice("this node joined the cluster", metadata: ["cluster.lease": "\(lease)"])
    }

    /// Renews the lease a few times per TTL until the task is cancelled. When it is lost (expired, or etcd
    /// unreachable for a whole TTL) it calls `lost` — every leadership on it has ended — and claims the membership
    /// again under a new lease, which fails, and is retried, while another process holds this node's id or URL.
    func keep(whenLost lost: @Sendable () -> Void) async {
        let ttl = Int64(configuration.leaseSeconds)
        var lastProblem: String?
        while !Task.isCancelled {
            do {
                if lease == 0 {
                    let lease = try await claim()
                    state.withLock { $0 = State(lease: lease, problem: nil) }
                    changes.bump()
                    lastProblem = nil
                    logger.notice("this node joined the cluster", metadata: ["cluster.lease": "\(lease)"])
                }
                // Until the lease is gone, or no renewal was answered for a whole TTL (what etcd then does
                // with it is unknown here, so this node acts as if it expired).
                try await etcd.keepAlive(
                    lease, every: .milliseconds(max(200, ttl * 1000 / 3)), deadline: .seconds(ttl), renewed: {})
            } catch is CancellationError {
                return
            } catch {
                let problem = "\(error)"
                if error is MembershipTaken { state.withLock { $0.problem = problem } }
                if problem != lastProblem {
                    lastProblem = problem
                    logger.error("this node cannot be a member of the cluster", metadata: ["error": "\(problem)"])
                }
            }
            if Task.isCancelled { return }
            let ended = state.withLock { state in
                defer { state.lease = 0 }
                return state.lease
            }
            // Its keys go with it, if etcd still has it: the membership is claimed again at once.
            if ended != 0 { try? await etcd.revokeLease(ended) }
            changes.bump()
            lost()
            logger.warning("this node lost its etcd lease; its leaderships have ended")
            try? await Task.sleep(for: .milliseconds(200))
        }
    }

    /// Revokes the lease (at shutdown): this node's keys go at once, and its leaderships pass to other nodes
    /// instead of when the lease would expire.
    func close() async {
        let lease = state.withLock { state in
            defer { state.lease = 0 }
            return state.lease
        }
        if lease != 0 { try? await etcd.revokeLease(lease) }
    }

    /// Grants a lease and creates, under it, this node's membership record and its advertise URL's claim, each
    /// only if absent (one transaction); while another lease holds either, waits for that record's deletion and
    /// tries again — as etcd's `concurrency.Campaign` waits for the keys before its own (`waitDeletes`) — for
    /// ``patience``, then throws ``MembershipTaken`` naming the holder. Never deletes or replaces another node's
    /// record.
    private func claim() async throws -> Int64 {
        let nodeID = configuration.nodeID
        let memberKey = keys.member(nodeID)
        let urlKey = keys.advertiser(configuration.advertiseURL)
        var member = Topicledger_Cluster_ClusterMember()
        member.id = nodeID
        member.url = configuration.advertiseURL
        let value: [UInt8] = try member.serializedBytes()
        let deadline = ContinuousClock.now + patience
        while true {
            let (lease, _) = try await etcd.grantLease(seconds: Int64(configuration.leaseSeconds))
            var request = Etcdserverpb_TxnRequest()
            request.compare = [.createRevision(of: memberKey, equals: 0), .createRevision(of: urlKey, equals: 0)]
            request.success = [.put(memberKey, value, lease: lease), .put(urlKey, Array(nodeID.utf8), lease: lease)]
            request.failure = [.range(memberKey), .range(urlKey)]
            let response: Etcdserverpb_TxnResponse
            do {
                response = try await etcd.txn(request)
            } catch {
                try? await etcd.revokeLease(lease)
                throw error
            }
            if response.succeeded { return lease }
            try? await etcd.revokeLease(lease)
            let holder = response.responses.first?.responseRange.kvs.first.flatMap {
                try? Topicledger_Cluster_ClusterMember(serializedBytes: $0.value)
            }
            let urlHolder = response.responses.last?.responseRange.kvs.first.map {
                String(decoding: $0.value, as: UTF8.self)
            }
            guard ContinuousClock.now < deadline else {
                throw MembershipTaken(
                    nodeID: nodeID, advertiseURL: configuration.advertiseURL, holderURL: holder?.url,
                    urlHolder: urlHolder)
            }
            // The first record held: once it is gone, the transaction says whether the other is.
            let held = response.responses.first?.responseRange.kvs.isEmpty == false ? memberKey : urlKey
            try await waitForDeletion(of: held, after: response.header.revision, until: deadline)
        }
    }

    /// Returns when `key` is deleted after `revision` (its holder's lease expired or was revoked), or at
    /// `deadline`, whichever comes first; ``retryAfterFailedWatch`` after a watch that failed.
    ///
    /// - Throws: `CancellationError` when the task is cancelled.
    private func waitForDeletion(of key: String, after revision: Int64, until deadline: ContinuousClock.Instant)
        async throws
    {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { [etcd] in
                do {
                    for try await response in etcd.watch(key: key, fromRevision: revision + 1)
                    where response.events.contains(where: { $0.type == .delete }) {
                        return
                    }
                } catch is CancellationError {
                    throw CancellationError()
                } catch {
                    try await Task.sleep(for: Self.retryAfterFailedWatch)
                }
            }
            group.addTask { try await Task.sleep(until: deadline) }
            defer { group.cancelAll() }
            try await group.next()
        }
    }
}
