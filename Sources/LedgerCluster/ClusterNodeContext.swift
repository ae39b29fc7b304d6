import LedgerCore
import LedgerStore
import Logging
import Synchronization

/// What every replica of a node shares: the etcd client, the key layout, the node's lease and the live
/// members.
///
/// - Note: Thread-safe.
final class ClusterNodeContext: Sendable {
    struct Membership: Sendable {
        /// The lease the node's keys hang on (0 before the first is granted).
        var lease: Int64 = 0
        /// The live members: id → advertised URL.
        var members: [String: String] = [:]
        /// Why this node's membership could not be claimed again (``MembershipTaken``), or `nil`.
        var problem: String?
    }

    let configuration: ClusterConfiguration
    let etcd: EtcdClient
    let keys: ClusterKeys
    let logger: Logger
    let membership = Mutex(Membership())
    /// Raised whenever what routes a request may change — a project's leader, this node's leadership, the live
    /// members — so that a wait on the route (a forwarded request, the APNs pusher) is told, not polled.
    let routing = Watermark()
    /// Replaces a project's ledger with a peer's copy: (project, the peer's URL, whether the replaced copy is
    /// kept aside — a fork, which is evidence — rather than discarded).
    typealias Reseeder = @Sendable (ProjectID, String, Bool) async throws -> Void
    private let reseederSlot = Mutex<Reseeder?>(nil)

    func reseeder() -> Reseeder? { reseederSlot.withLock { $0 } }
    func setReseeder(_ reseeder: @escaping Reseeder) { reseederSlot.withLock { $0 = reseeder } }

    init(configuration: ClusterConfiguration, etcd: EtcdClient, logger: Logger) {
        self.configuration = configuration
        self.etcd = etcd
        self.keys = ClusterKeys(prefix: configuration.keyPrefix)
        self.logger = logger
    }

    var nodeID: String { configuration.nodeID }

    func currentLease() -> Int64 { membership.withLock { $0.lease } }

    /// The live members' ids and URLs.
    var members: [String: String] { membership.withLock { $0.members } }

    /// The nodes that hold `project` now (``Placement``), this one counted as live.
    func holders(of project: ProjectID) -> [String] {
        var live = Set(members.keys)
        live.insert(nodeID)
        return Placement.holders(of: project, among: Array(live), replicas: configuration.replicas)
    }
}
