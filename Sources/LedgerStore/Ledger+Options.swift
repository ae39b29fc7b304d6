import LMDBKit
import LedgerCore

extension Ledger {
    /// How to open a ledger.
    public struct Options: Sendable {
        public enum Mode: Sendable { case readWrite, readOnly }
        public var mode: Mode = .readWrite
        public var limits = LedgerLimits()
        /// The time stamped on new events (clamped so times never decrease).
        public var clock: @Sendable () -> LedgerTime = { LedgerTime.now() }
        /// A batch closes once it holds this many operations.
        public var maximumBatchOperations = 20_000
        public var environment = LMDBEnvironment.Options()
        /// The size of the map the ledger's file is opened with (it doubles whenever it fills).
        public var initialMapBytes: Int {
            get { environment.mapSize }
            set { environment.mapSize = newValue }
        }
        /// Whether a commit also syncs LMDB's meta page on its own (off: `MDB_NOMETASYNC`, one fsync per commit;
        /// a cluster's node, whose commits are durable in etcd first, turns it off).
        public var syncsMetaPage: Bool {
            get { !environment.noMetaSync }
            set { environment.noMetaSync = !newValue }
        }
        /// Open for writing even though a rebuild was interrupted (only `rebuildProjections` should).
        public var forRebuild = false
        /// Whether a writer appends the `audience` event of every send (SPEC §2.4), including sends a crash
        /// left without one. Off only for rebuilds and benchmarks of the bare write path.
        public var recordsAudiences = true
        /// A send to a token, or to a topic whose audience has at most this many recipients, gets its `audience`
        /// event in the send's own transaction (one commit, and on a cluster one etcd transaction, for both);
        /// a larger audience, and a condition's, is recorded after it by the recorder, so reading and hashing
        /// it never holds up the writer. 0: always after.
        /// Hashing 1,024 device numbers costs the writer about 0.1 ms (16,163 take 1.39 ms: docs/performance.md).
        public var inlineAudienceLimit = 1024
        /// Told of every commit once it is released, after the ledger's own observers (``CommitRelease``), and of
        /// each group commit's duration: a server's delivery, APNs outbox and metrics. Must be quick and must not
        /// block.
        public var observer: (any LedgerCommitObserver)?
        /// How a group-commit batch keeps one failing request from failing its neighbours.
        public var isolation: RequestIsolation = .retryAlone
        /// Set on a node of a cluster: every group commit passes it before LMDB commits (``ReplicationGate``),
        /// and sends a crash left without an audience are not given one at open — their project's leader
        /// does that, when it takes the lead (``recordMissingAudiences()``).
        public var replication: (any ReplicationGate)?

        public init(mode: Mode = .readWrite) { self.mode = mode }
    }

    /// How a group-commit batch keeps one failing request from failing the others (both are atomic per
    /// request; the benchmark `tools/bench` measures both).
    public enum RequestIsolation: Sendable {
        /// One transaction for the batch; if anything fails, each request is retried in a transaction of its
        /// own. The default: failures are rare, and the common path pays nothing.
        case retryAlone
        /// One LMDB nested transaction per request inside the batch's transaction: a failing request's child
        /// is aborted and the rest commit, without a retry — but every request pays for a child.
        case nestedPerRequest
    }
}
