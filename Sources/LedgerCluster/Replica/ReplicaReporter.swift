import LedgerCore
import LedgerStore
import Logging
import Synchronization

/// A project replica's status (``ReplicaStatus``), and its reports of it: to routing (a leader that changed
/// raises the node's routing watermark), to the log (the moments it stalls, recovers or is damaged), and to etcd
/// under the node's lease (its applied head and its state, for `/v1/cluster`, trimming and re-seeding).
///
/// Woken, not polling: the head by the commit or applied block that moves it (``Ledger/waitForHead(_:upTo:)``),
/// the state by the updates that change it (``stateChanges``) and, while it catches up, by the moment it would
/// stall (``ReplicaProgress/stallsAt``).
///
/// - Note: Thread-safe.
final class ReplicaReporter: Sendable {
    /// The least time between two writes of the applied head, or of the state, to etcd, and the wait before one
    /// etcd did not take is tried again. Each is an etcd write (a Raft round and an fsync on a quorum): under load
    /// the head moves at every commit, and a follower goes from current to catching up and back at every block,
    /// so what happens within this time is written once.
    static let reportInterval: Duration = .milliseconds(500)
    /// How old a report that did not change grows before it is written again. Both keys hang on the node's lease:
    /// a lease granted after a lost one holds neither until they are written again, and nothing wakes the reporter
    /// for that.
    static let reReportAfter: Duration = .seconds(10)

    private let project: ProjectID
    private let node: ClusterNodeContext
    private let state = Mutex(ReplicaStatus())
    /// Raised by every update that changes the replica's state (``ReplicaStatus/replicaState``): what ``run()``
    /// waits on.
    private let stateChanges = Watermark()
    /// When the applied seq was last written to etcd, and which.
    private let reported = Mutex<(seq: UInt64, at: ContinuousClock.Instant)?>(nil)

    init(project: ProjectID, node: ClusterNodeContext) {
        self.project = project
        self.node = node
    }

    var status: ReplicaStatus { state.withLock { $0 } }

    /// Changes the status in one step; wakes ``run()`` when that changed the replica's state.
    func update<Value>(_ body: (inout ReplicaStatus) -> Value) -> Value {
        let (value, changed) = state.withLock { status in
            let before = status.replicaState
            let value = body(&status)
            return (value, status.replicaState != before)
        }
        if changed { stateChanges.bump() }
        return value
    }

    /// Records the project's leader as last seen; a change raises the node's routing watermark.
    func noteLeader(_ leader: String?) {
        let changed = state.withLock { state in
            defer { state.leader = leader }
            return state.leader != leader
        }
        if changed { node.routing.bump() }
    }

    func noteApplied(_ head: LedgerHead) {
        update {
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
        let isNew = update { state in
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

    /// For as long as the replica runs: logs the moment it becomes stalled (once, at error level) and the moment
    /// it recovers, and writes its state to etcd (under the node's lease) when it changed — at most once a
    /// ``reportInterval`` — or that report is ``reReportAfter`` old, for `/v1/cluster`.
    ///
    /// Waits between times on the updates that change the state, and, while the replica catches up, until the
    /// moment it would be stalled if nothing moves (``ReplicaProgress/stallsAt``): a stall is decided by elapsed
    /// time, and that time is known.
    func run() async {
        var wasStalled = false
        // The state last written to etcd (`nil` when etcd did not take it), and when it was tried.
        var last: (state: String?, at: ContinuousClock.Instant)?
        while !Task.isCancelled {
            let seen = stateChanges.level
            let now = ContinuousClock.now
            let (current, stallsAt) = state.withLock { status in
                let current = status.progress.state(at: now, damage: status.damage, storageFailure: status.stalled)
                return (current, current == .catchingUp ? status.progress.stallsAt : nil)
            }
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
            let due = last.map { $0.at + ($0.state == text ? Self.reReportAfter : Self.reportInterval) } ?? now
            if due <= now {
                var written = false
                let lease = node.currentLease()
                if lease != 0 {
                    written =
                        (try? await node.etcd.put(
                            node.keys.state(project, node: node.nodeID), Array(text.utf8), lease: lease)) != nil
                }
                last = (written ? text : nil, now)
                continue
            }
            let wake = min(due, stallsAt ?? due)
            _ = await stateChanges.wait(for: seen + 1, upTo: wake - ContinuousClock.now)
        }
    }

    /// Until cancelled: notes the head of `ledger` (as `head` reads it) and writes it to etcd
    /// (``reportApplied(_:)``) each time it moves, woken by the commit or the applied block that moves it
    /// (``Ledger/waitForHead(_:upTo:)``) — the moves of one ``reportInterval`` together — and again when that
    /// report is ``reReportAfter`` old, or a ``reportInterval`` after etcd did not take it.
    func reportProgress(of ledger: Ledger, head: @Sendable () async throws -> LedgerHead) async throws {
        while true {
            let started = ContinuousClock.now
            let current = try await head()
            noteApplied(current)
            let written = (try? await reportApplied(current)) != nil
            let moved = await ledger.waitForHead(
                current.seq + 1, upTo: written ? Self.reReportAfter : Self.reportInterval)
            try Task.checkCancellation()
            // A rate, not a poll: the head has moved, and what the next moments commit is written with it.
            if moved { try await Task.sleep(until: started + Self.reportInterval) }
        }
    }

    /// Writes the applied seq and head hash to etcd (under the node's lease) when the seq changed since the
    /// last report, or that report is ``reReportAfter`` old.
    func reportApplied(_ head: LedgerHead) async throws {
        let due = reported.withLock { last in
            guard let last else { return true }
            return last.seq != head.seq || ContinuousClock.now - last.at > Self.reReportAfter
        }
        guard due else { return }
        try await node.etcd.put(
            node.keys.applied(project, node: node.nodeID), ReplicationTail(seq: head.seq, hash: head.hash).encoded,
            lease: node.currentLease())
        reported.withLock { $0 = (head.seq, .now) }
    }
}
