import LedgerCore
import LedgerStore
import Logging
import Synchronization

/// A project replica's status (``ReplicaStatus``), and its reports of it: to routing (a leader that changed
/// raises the node's routing watermark), to the log (the moments it stalls, recovers or is damaged), and to etcd
/// under the node's lease (its applied head and its state, for `/v1/cluster`, trimming and re-seeding).
///
/// - Note: Thread-safe.
final class ReplicaReporter: Sendable {
    private let project: ProjectID
    private let node: ClusterNodeContext
    private let state = Mutex(ReplicaStatus())
    /// When the applied seq was last written to etcd, and which.
    private let reported = Mutex<(seq: UInt64, at: ContinuousClock.Instant)?>(nil)
    /// When the state was last written to etcd, and which.
    private let reportedState = Mutex<(state: String, at: ContinuousClock.Instant)?>(nil)

    init(project: ProjectID, node: ClusterNodeContext) {
        self.project = project
        self.node = node
    }

    var status: ReplicaStatus { state.withLock { $0 } }

    /// Changes the status in one step.
    func update<Value>(_ body: (inout ReplicaStatus) -> Value) -> Value { state.withLock { body(&$0) } }

    /// Records the project's leader as last seen; a change raises the node's routing watermark.
    func noteLeader(_ leader: String?) {
        let changed = state.withLock { state in
            defer { state.leader = leader }
            return state.leader != leader
        }
        if changed { node.routing.bump() }
    }

    func noteApplied(_ head: LedgerHead) {
        state.withLock {
            $0.appliedSeq = head.seq
            $0.headHash = head.hash
            $0.progress.applied(head.seq, at: .now)
        }
    }

    /// Marks the replica damaged (``ReplicaStatus/damage``) and returns the error to throw.
    ///
    /// Logged once per damage: a replica that stays damaged finds it again at every try. A damage already
    /// recorded with what came of it (`<reason>, and it could not be re-seeded: …`) is the same damage, and keeps
    /// the longer text — else a fork no peer can seed would alternate between the two, logging both every cycle.
    func damaged(_ reason: String) -> EtcdError {
        let isNew = state.withLock { state in
            if let current = state.damage, current.hasPrefix(reason) { return false }
            state.damage = reason
            return true
        }
        if isNew {
            node.logger.critical(
                "cluster replica is damaged", metadata: ["ledger.project": "\(project)", "reason": "\(reason)"])
        }
        return EtcdError(reason)
    }

    /// Every half second, for as long as the replica runs: logs the moment it becomes stalled (once, at error
    /// level) and the moment it recovers, and writes its state to etcd (under the node's lease) when it changed
    /// or that report is ten seconds old, for `/v1/cluster`.
    func run() async {
        var wasStalled = false
        while !Task.isCancelled {
            let current = status.replicaState
            if current.isStalled != wasStalled {
                wasStalled = current.isStalled
                let metadata: Logger.Metadata = ["ledger.project": "\(project)", "cluster.state": "\(current)"]
                if wasStalled {
                    node.logger.error("cluster replica is stalled", metadata: metadata)
                } else {
                    node.logger.notice("cluster replica is applying again", metadata: metadata)
                }
            }
            let text = current.description
            let due = reportedState.withLock { last in
                guard let last else { return true }
                return last.state != text || ContinuousClock.now - last.at > .seconds(10)
            }
            let lease = node.currentLease()
            if due, lease != 0,
                (try? await node.etcd.put(
                    node.keys.state(project, node: node.nodeID), Array(text.utf8), lease: lease)) != nil
            {
                reportedState.withLock { $0 = (text, .now) }
            }
            try? await Task.sleep(for: .milliseconds(500))
        }
    }

    /// Every half second, until cancelled: notes the head `head` reads, and writes it to etcd when it changed.
    func reportProgress(head: @Sendable () async throws -> LedgerHead) async throws {
        while true {
            try await Task.sleep(for: .milliseconds(500))
            let head = try await head()
            noteApplied(head)
            try? await reportApplied(head)
        }
    }

    /// Writes the applied seq and head hash to etcd (under the node's lease) when the seq changed since the
    /// last report, or that report is ten seconds old.
    func reportApplied(_ head: LedgerHead) async throws {
        let due = reported.withLock { last in
            guard let last else { return true }
            return last.seq != head.seq || ContinuousClock.now - last.at > .seconds(10)
        }
        guard due else { return }
        try await node.etcd.put(
            node.keys.applied(project, node: node.nodeID), ReplicationTail(seq: head.seq, hash: head.hash).encoded,
            lease: node.currentLease())
        reported.withLock { $0 = (head.seq, .now) }
    }
}
