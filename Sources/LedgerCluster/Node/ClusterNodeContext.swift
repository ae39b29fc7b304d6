import LedgerCore
import LedgerStore
import Logging
import Synchronization

/// What every replica of a node shares: the etcd client, the key layout, the node's session (its lease), the
/// live members, the routing watermark and the server that holds the ledgers.
///
/// - Note: Thread-safe.
final class ClusterNodeContext: Sendable {
    let configuration: ClusterConfiguration
    let etcd: EtcdClient
    let keys: ClusterKeys
    let logger: Logger
    /// The live members: id → advertised URL; `nil` until they have been read once.
    private let liveMembers = Mutex<[String: String]?>(nil)
    let session: EtcdSession
    /// Raised whenever what routes a request may change (``ReplicaGates/routing``).
    let routing: Watermark
    /// The server that holds this node's ledgers.
    let host: any ReplicaHost

    init(
        configuration: ClusterConfiguration, etcd: EtcdClient, routing: Watermark, host: any ReplicaHost,
        logger: Logger
    ) {
        self.configuration = configuration
        self.etcd = etcd
        self.keys = ClusterKeys(prefix: configuration.keyPrefix)
        self.logger = logger
        self.routing = routing
        self.host = host
        session = EtcdSession(configuration: configuration, etcd: etcd, keys: keys, routing: routing, logger: logger)
    }

    var nodeID: String { configuration.nodeID }

    func currentLease() -> Int64 { session.lease }

    /// The live members' ids and URLs.
    var members: [String: String] { liveMembers.withLock { $0 } ?? [:] }

    /// Whether the live members have been read since the node started.
    var membersRead: Bool { liveMembers.withLock { $0 != nil } }

    /// Records the live members as last read; whether they changed.
    func setMembers(_ members: [String: String]) -> Bool {
        liveMembers.withLock { current in
            defer { current = members }
            return current != members
        }
    }

    /// The nodes that hold `project` now (``Placement``), this one counted as live.
    func holders(of project: ProjectID) -> [String] {
        var live = Set(members.keys)
        live.insert(nodeID)
        return Placement.holders(of: project, among: Array(live), replicas: configuration.replicas)
    }
}
