/// How a node takes part in a cluster (the `cluster` section of the config; docs/cluster.md).
public struct ClusterConfiguration: Sendable, Equatable {
    /// This node's name, unique in the cluster.
    public var nodeID: String
    /// Where the other nodes reach this one (`http://host:port`): forwarded writes, re-seeding.
    public var advertiseURL: String
    /// `host:port` of each etcd member.
    public var etcdEndpoints: [String]
    /// The TTL of the node's etcd lease, on which its membership and its leaderships hang.
    public var leaseSeconds: Int = 5
    /// How many nodes hold each project.
    public var replicas: Int = 3
    /// SHA-256 (`sha256:<hex>`) of the secrets peers present to each other.
    public var peerKeys: [String] = []
    /// The secret this node presents to its peers (read from the section's `peerSecretFile`); its hash must be
    /// one of ``peerKeys``.
    public var peerSecret: String?
    /// The largest block (bytes of records) one etcd transaction carries; a larger commit is split. etcd
    /// refuses a request over 1.5 MiB (`--max-request-bytes`).
    public var maximumBlockBytes: Int = 1 << 20
    /// How many events of each log etcd keeps behind its tail once every replica has applied them.
    public var retainedEvents: UInt64 = 100_000
    /// Whether a leader commits a group commit to its ledger before etcd holds it, goes on to the next, and
    /// answers each once etcd does — rolling back what etcd refuses (``ReplicationGate/commitsAhead``). `false`:
    /// each commit waits for etcd inside its LMDB transaction (one commit at a time; the baseline of the
    /// cluster benchmark).
    public var commitsAhead = true
    /// Where the cluster's keys live in etcd.
    public var keyPrefix: String = "/topicledger/"

    /// The values ``leaseSeconds``, ``replicas`` and ``maximumBlockBytes`` may take (etcd refuses a request over
    /// 1.5 MiB; a block leaves room for its key and the transaction around it).
    public static let leaseSecondsRange = 1...3600
    public static let replicasRange = 1...99
    public static let blockBytesRange = (64 << 10)...((1 << 20) + (256 << 10))

    public init(nodeID: String, advertiseURL: String, etcdEndpoints: [String]) {
        self.nodeID = nodeID
        self.advertiseURL = advertiseURL
        self.etcdEndpoints = etcdEndpoints
    }

    /// Why the configuration cannot be used, or `nil`.
    public var problem: String? {
        if nodeID.isEmpty || nodeID.utf8.count > 64
            || !nodeID.unicodeScalars.allSatisfy({
                $0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "-" || $0 == "_"
            })
        {
            return "cluster.nodeId must be 1 to 64 letters, digits, '-' or '_'"
        }
        guard advertiseURL.hasPrefix("http://") || advertiseURL.hasPrefix("https://") else {
            return "cluster.advertiseURL must be an http:// or https:// URL"
        }
        guard !etcdEndpoints.isEmpty else { return "cluster.etcdEndpoints must name at least one etcd member" }
        guard Self.leaseSecondsRange.contains(leaseSeconds) else { return "cluster.leaseSeconds must be 1 to 3600" }
        guard Self.replicasRange.contains(replicas) else { return "cluster.replicas must be 1 to 99" }
        guard Self.blockBytesRange.contains(maximumBlockBytes) else {
            return "cluster.maximumBlockBytes must be 64 KiB to 1.25 MiB"
        }
        return nil
    }
}
