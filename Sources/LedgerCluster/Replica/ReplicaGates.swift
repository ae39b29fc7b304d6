import LedgerCore
import LedgerStore
import Synchronization

/// The gate of each project on this node (``ReplicaGate``), made before anything that uses them: the server
/// opens each project's ledger with its gate (``Ledger/Options/replication``), and the ``ClusterNode`` leads
/// through the same gate. Being first breaks what would be a cycle — the node needs the opened ledgers
/// (``ReplicaHost``), and the ledgers need the node's gates.
///
/// - Note: Thread-safe.
public final class ReplicaGates: Sendable {
    /// Raised whenever what routes a request may change — a project's leader, this node's leadership, the live
    /// members — so that a wait on the route (a forwarded request, the APNs pusher) is told, not polled.
    let routing = Watermark()
    private let gates = Mutex<[ProjectID: ReplicaGate]>([:])
    /// How long a writer waits for etcd before it gives up on a block.
    private let waitLimit: Duration
    private let commitsAhead: Bool

    public init(configuration: ClusterConfiguration) {
        waitLimit = .seconds(Int64(max(2, configuration.leaseSeconds)))
        commitsAhead = configuration.commitsAhead
    }

    /// The gate the ledger of `project` must be opened with (``Ledger/Options/replication``).
    public func gate(for project: ProjectID) -> any ReplicationGate { replicaGate(for: project) }

    func replicaGate(for project: ProjectID) -> ReplicaGate {
        gates.withLock { gates in
            if let gate = gates[project] { return gate }
            let gate = ReplicaGate(
                project: project.rawValue, waitLimit: waitLimit, commitsAhead: commitsAhead, routing: routing)
            gates[project] = gate
            return gate
        }
    }

    /// Whether this node leads `project` now.
    func isLeading(_ project: ProjectID) -> Bool { gates.withLock { $0[project] }?.isLeading == true }

    /// Every gate refuses from now on, until its replica leads again (a lost lease, a shutdown).
    func followAll() {
        for gate in gates.withLock({ Array($0.values) }) { gate.follow() }
    }
}
