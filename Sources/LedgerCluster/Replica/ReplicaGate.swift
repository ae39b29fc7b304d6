import LedgerStore
import Synchronization

/// The ``ReplicationGate`` of one project on one node: refuses while the node follows; while it leads, queues
/// each group commit's block for the project's replica, which writes the queue to etcd in order, as many blocks
/// a fenced transaction as fit (``LeaderLog/write(_:)``).
///
/// A block committed ahead (``commitsAhead``) is handed over once LMDB holds it and its requests are answered
/// when etcd has it; the writer goes on meanwhile, at most ``maximumInFlight`` blocks ahead of etcd. An erasure's
/// block (``replicate(_:)``) still waits on the writer's thread, in the transaction, behind the blocks before it.
///
/// - Note: Thread-safe.
final class ReplicaGate: ReplicationGate {
    /// What the gate lets through.
    enum Role: Sendable, Equatable {
        /// Writes are refused: another node leads, or none does, or this one is catching up.
        case following
        /// This node leads, by the election key it created at `revision`; the log in etcd ends at `tail`.
        case leading(revision: Int64, tail: ReplicationTail)
    }

    /// One block to write, and how to tell the writer what became of it.
    struct Job: Sendable {
        let block: ReplicatedBlock
        let revision: Int64
        /// Where etcd's log ends before this block, when every block handed over before it is taken.
        let previousTail: ReplicationTail
        let complete: @Sendable (Result<Void, ReplicationRefusal>) -> Void
    }

    let project: String
    private struct State {
        var role = Role.following
        /// The end of the last block handed over while leading (etcd's tail once every one is taken).
        var handed = ReplicationTail(seq: 0, hash: [])
        /// Blocks handed over and not yet taken by the writer of the lead; what wakes it.
        var queue: [Job] = []
        var wake: AsyncStream<Void>.Continuation?
        /// Blocks handed over and not yet answered; writers waiting for one to be.
        var inFlight = 0
        var slotWaiters: [@Sendable (Bool) -> Void] = []
        /// Whether the ledger failed a commit while leading: a batch committed ahead failed in LMDB
        /// (``commitFailed(_:)``), or an erasure's block etcd took did not commit (the writer then handed over a
        /// block that does not extend it) — a full disk, for which this node gives the leadership up.
        var lostCommit = false
        /// After a failed commit: nothing more is admitted, and the lead ends once the queue is written.
        var resigning = false
    }

    private let state = Mutex(State())
    /// How long the writer waits for etcd before it gives up on a block.
    let waitLimit: Duration
    let commitsAhead: Bool
    /// How many blocks may be handed over and not yet in etcd: what a leader may have to roll back.
    let maximumInFlight: Int

    /// Raised at each change of role (``ClusterNodeContext/routing``).
    private let routing: Watermark

    init(
        project: String, waitLimit: Duration, commitsAhead: Bool = false, maximumInFlight: Int = 64,
        routing: Watermark = Watermark()
    ) {
        self.project = project
        self.waitLimit = waitLimit
        self.commitsAhead = commitsAhead
        self.maximumInFlight = maximumInFlight
        self.routing = routing
    }

    var currentRole: Role { state.withLock { $0.role } }

    /// Lets writes through, as the leader elected at `revision`, extending `tail`; returns the blocks to write,
    /// in order and as they queue up, which end when the lead does (``follow()``).
    func lead(revision: Int64, tail: ReplicationTail) -> Lead {
        let (wakeups, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let previous = state.withLock { state in
            defer {
                state.role = .leading(revision: revision, tail: tail)
                state.handed = tail
                state.wake = wake
                state.resigning = false
            }
            return (state.wake, state.queue)
        }
        previous.0?.finish()
        fail(previous.1)
        routing.bump()
        return Lead(gate: self, revision: revision, wakeups: wakeups)
    }

    /// Refuses writes from now on: blocks queued and not taken yet are refused as well.
    func follow() {
        let (wake, queue, waiters, role) = state.withLock { state in
            defer {
                state.role = .following
                state.wake = nil
                state.queue = []
                state.slotWaiters = []
                state.resigning = false
            }
            return (state.wake, state.queue, state.slotWaiters, state.role)
        }
        wake?.finish()
        fail(queue)
        for waiter in waiters { waiter(false) }
        if case .leading = role { routing.bump() }
    }

    private func fail(_ jobs: [Job]) {
        for job in jobs {
            job.complete(.failure(ReplicationRefusal(.notLeader, "this node stopped leading project \(project)")))
        }
    }

    /// Whether the ledger failed a commit while this node led (and forgets it): see ``State/lostCommit``.
    func takeLostCommit() -> Bool {
        state.withLock { state in
            defer { state.lostCommit = false }
            return state.lostCommit
        }
    }

    /// Whether this node leads (as far as it knows: etcd decides at each write).
    var isLeading: Bool { if case .leading = currentRole { true } else { false } }

    // MARK: The writer's side

    func admitAhead(_ block: ReplicatedBlock) throws -> UInt64 {
        while true {
            let held = try admission(of: block)
            if let held { return held }
            // As many blocks as may be are on their way to etcd: wait for one to be answered.
            let outcome = BlockingWait.wait(timeout: waitLimit) { (slot: @escaping @Sendable (Bool) -> Void) in
                state.withLock { state in
                    guard state.inFlight >= maximumInFlight, case .leading = state.role else { return false }
                    state.slotWaiters.append(slot)
                    return true
                }
            }
            if case .timedOut = outcome {
                follow()
                throw ReplicationRefusal(
                    .clusterUnavailable,
                    "etcd took none of \(maximumInFlight) blocks within \(waitLimit) for project \(project)")
            }
        }
    }

    /// Refuses `block` unless this node leads and it follows the last block handed over; the seq etcd holds
    /// the log through when a block may be handed over now, `nil` when as many as may be are in flight.
    private func admission(of block: ReplicatedBlock) throws -> UInt64? {
        let admission = state.withLock { state -> Result<UInt64?, ReplicationRefusal> in
            guard case .leading(_, let tail) = state.role else {
                return .failure(ReplicationRefusal(.notLeader, "this node does not lead project \(project)"))
            }
            guard !state.resigning else {
                return .failure(
                    ReplicationRefusal(
                        .notLeader,
                        "this node gives the leadership of project \(project) up: its ledger failed a commit"))
            }
            guard
                block.records.isEmpty
                    || (block.firstSeq == state.handed.seq + 1 && block.previousHash == state.handed.hash)
            else {
                state.lostCommit = true
                return .failure(
                    ReplicationRefusal(
                        .staleTail,
                        "the cluster's log of project \(project) ends at \(state.handed), not where this node's does"))
            }
            return .success(state.inFlight < maximumInFlight ? tail.seq : nil)
        }
        if case .failure(let refusal) = admission, refusal.reason == .staleTail { follow() }
        return try admission.get()
    }

    func handOver(_ block: ReplicatedBlock, acknowledged: @escaping @Sendable (ReplicationRefusal?) -> Void) {
        let wake = state.withLock { state -> AsyncStream<Void>.Continuation? in
            guard case .leading(let revision, _) = state.role, let wake = state.wake else { return nil }
            let job = Job(block: block, revision: revision, previousTail: state.handed) { [self] result in
                answered(block, of: revision, result)
                if case .failure(let refusal) = result { acknowledged(refusal) } else { acknowledged(nil) }
            }
            if !block.records.isEmpty { state.handed = ReplicationTail(seq: block.lastSeq, hash: block.lastHash) }
            state.inFlight += 1
            state.queue.append(job)
            return wake
        }
        guard let wake else {
            return acknowledged(ReplicationRefusal(.notLeader, "this node stopped leading project \(project)"))
        }
        wake.yield()
    }

    /// Admits nothing more; the blocks already handed over are still written (their events are committed
    /// here), and then the lead ends (``Lead``), and the replica gives the leadership up.
    func commitFailed(_ error: any Error) {
        let wake = state.withLock { state -> AsyncStream<Void>.Continuation? in
            guard case .leading = state.role else { return nil }
            state.lostCommit = true
            state.resigning = true
            return state.wake
        }
        wake?.yield()
    }

    /// Once etcd answered for `block`: one slot fewer in flight; the tail moved, or the gate closes.
    private func answered(_ block: ReplicatedBlock, of revision: Int64, _ result: Result<Void, ReplicationRefusal>) {
        let waiters = state.withLock { state in
            defer { state.slotWaiters = [] }
            state.inFlight -= 1
            if case .success = result, !block.records.isEmpty, case .leading(revision, _) = state.role {
                state.role = .leading(
                    revision: revision, tail: ReplicationTail(seq: block.lastSeq, hash: block.lastHash))
            }
            return state.slotWaiters
        }
        for waiter in waiters { waiter(true) }
        if case .failure = result { follow() }
    }

    func replicate(_ block: ReplicatedBlock) throws {
        _ = try admission(of: block)
        try waitFor(block)
    }

    func confirmLeadership() throws {
        guard case .leading(_, let tail) = currentRole else {
            throw ReplicationRefusal(.notLeader, "this node does not lead project \(project)")
        }
        try waitFor(ReplicatedBlock(firstSeq: tail.seq + 1, previousHash: tail.hash, records: []))
    }

    /// Hands `block` over and blocks the writer's thread (``BlockingWait``) until etcd answers for it — after
    /// every block handed over before it — or ``waitLimit`` passes.
    private func waitFor(_ block: ReplicatedBlock) throws {
        let outcome = BlockingWait.wait(timeout: waitLimit) {
            (done: @escaping @Sendable (ReplicationRefusal?) -> Void) in
            handOver(block, acknowledged: done)
            return true
        }
        switch outcome {
        case .completed(nil), .notStarted:
            return
        case .completed(let refusal?):
            throw refusal
        case .timedOut:
            // The block may yet land in etcd: this node must read the log back before it writes again.
            follow()
            throw ReplicationRefusal(
                .clusterUnavailable, "etcd did not answer within \(waitLimit) for project \(project)")
        }
    }

    // MARK: The replica's side

    /// The blocks of one lead, in order: each element is every block queued since the last one was taken.
    struct Lead: AsyncSequence, Sendable {
        let gate: ReplicaGate
        let revision: Int64
        let wakeups: AsyncStream<Void>

        func makeAsyncIterator() -> Iterator {
            Iterator(gate: gate, revision: revision, wakeups: wakeups.makeAsyncIterator())
        }

        struct Iterator: AsyncIteratorProtocol {
            let gate: ReplicaGate
            let revision: Int64
            var wakeups: AsyncStream<Void>.AsyncIterator

            mutating func next() async -> [Job]? {
                while true {
                    guard let jobs = gate.takeQueued(revision: revision) else { return nil }
                    if !jobs.isEmpty { return jobs }
                    guard await wakeups.next() != nil else { return nil }
                }
            }
        }
    }

    /// The blocks queued while leading at `revision`, taken off the queue; `nil` once that lead is over — or,
    /// after a failed commit, written out.
    private func takeQueued(revision: Int64) -> [Job]? {
        state.withLock { state in
            guard case .leading(revision, _) = state.role, !(state.resigning && state.queue.isEmpty) else {
                return nil
            }
            defer { state.queue = [] }
            return state.queue
        }
    }
}
