import LedgerCore

/// Where the cluster keeps what it shares in etcd, under one prefix (docs/cluster.md, "etcd keys").
///
/// Keys are bytes; seqs in them are 20 decimal digits, so that etcd's byte order is seq order.
public struct ClusterKeys: Sendable {
    public let prefix: String

    public init(prefix: String = "/topicledger/") { self.prefix = prefix }

    /// The prefix of every node's membership key.
    public var members: String { prefix + "members/" }
    /// Node `node`'s membership key (under its lease).
    public func member(_ node: String) -> String { members + node }
    /// The key that claims advertise URL `url` for one node (under its lease; the value is the node's id).
    public func advertiser(_ url: String) -> String {
        var url = Substring(url)
        while url.hasSuffix("/") { url = url.dropLast() }
        return prefix + "urls/" + url
    }

    /// The prefix of everything of `project`.
    public func project(_ project: ProjectID) -> String { prefix + "projects/" + project.rawValue + "/" }
    /// The election key of `project`: whoever created it (under their lease) leads the project.
    public func leader(_ project: ProjectID) -> String { self.project(project) + "leader" }
    /// The tail of `project`'s replicated log: the seq and chain hash of its last committed block.
    public func tail(_ project: ProjectID) -> String { self.project(project) + "tail" }
    /// The prefix of `project`'s blocks.
    public func blocks(_ project: ProjectID) -> String { self.project(project) + "blocks/" }
    /// The key of `project`'s block beginning at `firstSeq`.
    public func block(_ project: ProjectID, firstSeq: UInt64) -> String { blocks(project) + Self.padded(firstSeq) }
    /// The prefix of the seqs `project`'s replicas have applied.
    public func applied(_ project: ProjectID) -> String { self.project(project) + "applied/" }
    /// The seq `node` has applied of `project`.
    public func applied(_ project: ProjectID, node: String) -> String { applied(project) + node }
    /// The prefix of the states of `project`'s replicas (``ReplicaProgress/State``, as text).
    public func states(_ project: ProjectID) -> String { self.project(project) + "states/" }
    /// The state of `node`'s replica of `project`.
    public func state(_ project: ProjectID, node: String) -> String { states(project) + node }

    /// The prefix of what `project`'s replicas last cosigned (``ReplicaCosignature``).
    public func cosigned(_ project: ProjectID) -> String { self.project(project) + "cosigned/" }
    /// What `node` last cosigned of `project`'s checkpoints.
    public func cosigned(_ project: ProjectID, node: String) -> String { cosigned(project) + node }

    /// The project a key under `projects/` belongs to.
    public func projectName(in key: String) -> String? {
        let projects = prefix + "projects/"
        guard key.hasPrefix(projects) else { return nil }
        return key.dropFirst(projects.count).split(separator: "/", maxSplits: 1).first.map(String.init)
    }

    /// The seq a block key ends with.
    public static func seq(inBlockKey key: String) -> UInt64? {
        guard let last = key.split(separator: "/").last, last.count == 20 else { return nil }
        return UInt64(last)
    }

    static func padded(_ seq: UInt64) -> String {
        let digits = String(seq)
        return String(repeating: "0", count: 20 - digits.count) + digits
    }
}
