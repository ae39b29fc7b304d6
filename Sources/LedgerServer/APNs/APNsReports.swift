import LedgerCore
import Synchronization

/// What each pushing project's APNs pusher last reported (``ProjectPusher``), for `/readyz` and the metrics.
///
/// - Note: Thread-safe.
final class APNsReports: Sendable {
    /// What a project's APNs pusher reports: why APNs refuses it or does not answer (`nil`: neither), whether
    /// APNs has not answered for ``ProjectPusher/silenceLimit``, and the pushes it owes; apart from those, why its
    /// broadcasts fail (`nil`: they do not), so that neither claims the other fails.
    struct State: Sendable {
        var problem: String?
        var outboxDepth: Int
        var notAnswering = false
        var broadcastProblem: String? = nil
    }

    private let states = Mutex<[ProjectID: State]>([:])

    /// What `project`'s APNs pusher last reported, or `nil` (it has none).
    func state(of project: ProjectID) -> State? { states.withLock { $0[project] } }

    func report(_ state: State, for project: ProjectID) {
        states.withLock { $0[project] = state }
    }

    /// The pushes owed over every project, and how many projects APNs refuses.
    func totals() -> (outboxDepth: Int, failingProjects: Int) {
        states.withLock { states in
            (
                states.values.reduce(0) { $0 + $1.outboxDepth },
                states.values.filter { $0.problem != nil }.count
            )
        }
    }
}
