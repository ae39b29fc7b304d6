import LedgerStore
import Synchronization

/// The ``ReplicationGate`` of one project on one node: refuses while the node follows; while it leads, hands
/// each group commit's block to the project's replica (which writes it to etcd in a fenced transaction) and
/// waits, on the writer's thread, for etcd's answer.
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
        let previousTail: ReplicationTail
        let complete: @Sendable (Result<Void, ReplicationRefusal>) -> Void
    }

    let project: String
    private struct State {
        var role = Role.following
        /// Where blocks go while leading: the stream of the lead that ``lead(revision:tail:)`` began.
        var jobs: AsyncStream<Job>.Continuation?
        /// Whether the writer handed over a block that does not extend the last one etcd took from it: its
        /// ledger did not commit that one (a full disk), so this node's log lacks a block the cluster holds.
        var lostCommit = false
    }

    private let state = Mutex(State())
    /// How long the writer waits for etcd before it gives up on a block.
    let waitLimit: Duration

    /// Raised at each change of role (``ClusterNodeContext/routing``).
    private let routing: Watermark

    init(project: String, waitLimit: Duration, routing: Watermark = Watermark()) {
        self.project = project
        self.waitLimit = waitLimit
        self.routing = routing
    }

    var currentRole: Role { state.withLock { $0.role } }

    /// Lets writes through, as the leader elected at `revision`, extending `tail`; returns the blocks to write,
    /// in order, which end when the lead does (``follow()``).
    func lead(revision: Int64, tail: ReplicationTail) -> AsyncStream<Job> {
        let (jobs, continuation) = AsyncStream.makeStream(of: Job.self)
        let previous = state.withLock { state in
            defer {
                state.role = .leading(revision: revision, tail: tail)
                state.jobs = continuation
            }
            return state.jobs
        }
        previous?.finish()
        routing.bump()
        return jobs
    }

    /// Refuses writes from now on (blocks queued and not begun are refused as well).
    func follow() {
        let jobs = state.withLock { state -> (AsyncStream<Job>.Continuation?, Role) in
            defer {
                state.role = .following
                state.jobs = nil
            }
            return (state.jobs, state.role)
        }
        jobs.0?.finish()
        if case .leading = jobs.1 { routing.bump() }
    }

    /// Whether the ledger failed to commit a block etcd took while this node led (and forgets it): see
    /// ``State/lostCommit``.
    func takeLostCommit() -> Bool {
        state.withLock { state in
            defer { state.lostCommit = false }
            return state.lostCommit
        }
    }

    /// Whether this node leads (as far as it knows: etcd decides at each write).
    var isLeading: Bool { if case .leading = currentRole { true } else { false } }

    func replicate(_ block: ReplicatedBlock) throws {
        guard case .leading(let revision, let tail) = currentRole else {
            throw ReplicationRefusal(.notLeader, "this node does not lead project \(project)")
        }
        guard block.firstSeq == tail.seq + 1, block.previousHash == tail.hash else {
            state.withLock { $0.lostCommit = true }
            follow()
            throw ReplicationRefusal(
                .staleTail, "the cluster's log of project \(project) ends at \(tail), not where this node's does")
        }
        let outcome = try wait(for: Job(block: block, revision: revision, previousTail: tail, complete: { _ in }))
        switch outcome {
        case .success:
            let end = ReplicationTail(seq: block.lastSeq, hash: block.lastHash)
            state.withLock { state in
                if case .leading(revision, _) = state.role { state.role = .leading(revision: revision, tail: end) }
            }
        case .failure(let refusal):
            follow()
            throw refusal
        }
    }

    func confirmLeadership() throws {
        guard case .leading(let revision, let tail) = currentRole else {
            throw ReplicationRefusal(.notLeader, "this node does not lead project \(project)")
        }
        let empty = ReplicatedBlock(firstSeq: tail.seq + 1, previousHash: tail.hash, records: [])
        if case .failure(let refusal) = try wait(
            for: Job(block: empty, revision: revision, previousTail: tail, complete: { _ in }))
        {
            follow()
            throw refusal
        }
    }

    /// Queues the job and blocks the writer's thread (``BlockingWait``) until it is done or ``waitLimit`` passes.
    private func wait(for job: Job) throws -> Result<Void, ReplicationRefusal> {
        let jobs = state.withLock { $0.jobs }
        let outcome = BlockingWait.wait(timeout: waitLimit) { complete in
            let queued = Job(
                block: job.block, revision: job.revision, previousTail: job.previousTail, complete: complete)
            guard case .enqueued = jobs?.yield(queued) else { return false }
            return true
        }
        switch outcome {
        case .completed(let result):
            return result
        case .notStarted:
            return .failure(ReplicationRefusal(.notLeader, "this node stopped leading project \(project)"))
        case .timedOut:
            // The block may yet land in etcd: this node must read the log back before it writes again.
            follow()
            throw ReplicationRefusal(
                .clusterUnavailable, "etcd did not answer within \(waitLimit) for project \(project)")
        }
    }

}
