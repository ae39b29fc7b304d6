/// What `GET /v1/cluster` and `ledger cluster status` show.
public struct ClusterStatus: Sendable, Codable, Equatable {
    public struct Node: Sendable, Codable, Equatable {
        public var id: String
        public var url: String
        public var alive: Bool
    }

    public struct Replica: Sendable, Codable, Equatable {
        public var node: String
        public var appliedSeq: UInt64
        public var headHash: String
        /// `current`, `catching up`, or `stalled: <reason>` (docs/cluster.md, "Replica states").
        public var state: String
        /// Events of the cluster's log the replica has not applied.
        public var lagEvents: UInt64
        /// The largest checkpoint size the replica cosigned, having checked it against its own copy; nil when it
        /// has cosigned none.
        public var cosignedSize: UInt64?
        /// The replica's cosigner vkey (C2SP tlog-cosignature), which its cosignatures verify with.
        public var cosignerKey: String?
    }

    public struct Project: Sendable, Codable, Equatable {
        public var project: String
        /// The node leading it, `nil` when none does.
        public var leader: String?
        public var replicas: [Replica]
    }

    public var nodes: [Node]
    public var projects: [Project]
}
