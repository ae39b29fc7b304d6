import Foundation
import LMDBKit
import LedgerCore
import Logging

/// One project's ledger: the hash-chained event log and its projections in one LMDB environment
/// under `<data>/<project>/`.
///
/// Open it for writing (one process at a time, enforced by a lock file) or read-only (any number of
/// processes, also while a writer runs).
///
/// ```swift
/// let ledger = try Ledger.open(dataDirectory: "./ledger-data", project: .default, logger: logger)
/// let receipt = try await ledger.append(WriteRequest(actor: "admin", requestID: "r1",
///     operations: [.subscribe(token, try TopicName("news"), via: .iid)]))
/// ```
///
/// - Note: Thread-safe.
public final class Ledger: Sendable {
    public let project: ProjectID
    /// The directory holding this project's LMDB environment.
    public let directory: String
    package let environment: LMDBEnvironment
    package let schema: LedgerSchema
    package let options: Options
    package let logger: Logger
    private let writerLock: WriterLock?
    /// The data file this ledger mapped (writers only): see ``writeProblem``.
    private let dataFile: DataFileWatch?
    /// The single writer (``LedgerWriter``); `nil` when opened read-only.
    let writer: LedgerWriter?
    /// The path every commit leaves by: the writer's, and a replica's applied blocks (``notifyReplicated(through:sends:)``).
    private let release: CommitRelease
    /// What follows an erasure, for the writer and for a follower's applied blocks (writers only).
    let compaction: ErasureCompaction?
    let audienceRecorder: AudienceRecorder?
    /// Recent audiences' recipient digests, for the audience recorder and ``recordAudiences(of:time:)``.
    let digestMemo = LockedValue(RecipientDigestMemo())
    /// When each topic's membership last changed, as commits were released (for the memo).
    let topicChanges: TopicChangeTracker
    /// Tasks waiting for the head to reach a seq (``waitForHead(_:upTo:)``).
    private let headWaiters: Watermark
    /// The roll-backs run on this ledger (``rollBack(after:progress:)``), for requests waiting them out.
    let rollBacks = RollBackWatch()

    /// Opens the ledger of `project` under `dataDirectory`, creating it when opened for writing.
    ///
    /// - Throws: `StoreError` `.locked` (another process writes it), `.notFound` (read-only and absent),
    ///   `.incompatible` (written by another layout or for another project), `.rebuildRequired` (an
    ///   interrupted rebuild, for writers), `.corrupt` (for writers: its head and log disagree),
    ///   `.unavailable` (I/O).
    public static func open(
        dataDirectory: String, project: ProjectID, options: Options = Options(), logger: Logger
    ) throws -> Ledger {
        let storage = try LedgerStorage.open(dataDirectory: dataDirectory, project: project, options: options)
        if options.mode == .readWrite, !options.forRebuild, let through = try interruptedRebuild(storage) {
            throw StoreError(
                .rebuildRequired,
                "a rebuild or bulk import of \(storage.directory) stopped after seq \(through); run `ledger rebuild`"
                    + " before writing")
        }
        return try Ledger(storage: storage, project: project, options: options, logger: logger)
    }

    /// Starts the writer and the audience recorder on opened storage; nothing for readers.
    ///
    /// A commit's observers, in the order they are told (``CommitRelease``): the head's waiters, the topics'
    /// change dates, the audience recorder, and the server's ``Options/observer``.
    private init(storage: LedgerStorage, project: ProjectID, options: Options, logger: Logger) throws {
        self.project = project
        self.directory = storage.directory
        self.environment = storage.environment
        self.schema = storage.schema
        self.writerLock = storage.writerLock
        self.options = options
        self.logger = logger
        let head = try storage.environment.read { try LedgerSnapshot(txn: $0, schema: storage.schema).head().seq }
        let changes = TopicChangeTracker(head: head)
        self.topicChanges = changes
        let headWaiters = Watermark(head)
        self.headWaiters = headWaiters
        let writesHere = options.mode == .readWrite
        let dataFile = writesHere ? DataFileWatch(path: storage.directory + "/data.mdb") : nil
        self.dataFile = dataFile
        let writerReference = LockedValue(WeakWriter())
        let recorder =
            writesHere && options.recordsAudiences && !options.forRebuild
            ? Self.startRecorder(
                storage: storage, writer: writerReference, memo: digestMemo, changes: changes, logger: logger)
            : nil
        self.audienceRecorder = recorder
        let observers: [(any LedgerCommitObserver)?] = [
            HeadRelease(waiters: headWaiters), changes, recorder, options.observer,
        ]
        let release = CommitRelease(observers.compactMap { $0 })
        self.release = release
        guard writesHere else {
            self.compaction = nil
            self.writer = nil
            return
        }
        let compaction = ErasureCompaction(environment: storage.environment, dataFile: dataFile, logger: logger)
        self.compaction = compaction
        // A compaction owed by an earlier process (it failed, or a crash interrupted it) is made before anything
        // else; if it still fails, writes are refused and `/readyz` says why until it succeeds.
        if let owed = compaction.problem {
            do {
                _ = try compaction.settleOwed()
            } catch {
                logger.critical(
                    "the ledger's file owes a compaction after an erasure and cannot be compacted; writes wait for it",
                    metadata: ["ledger.project": "\(project)", "ledger.owed": "\(owed)", "error": "\(error)"])
            }
        }
        let writer = LedgerWriter(
            storage: storage, options: options, release: release, compaction: compaction, dataFile: dataFile,
            logger: logger)
        self.writer = writer
        writerReference.withLock { $0.writer = writer }
        // Sends a crash (or a rebuild) left without an audience get one now; a cluster's leader does it when it
        // takes the lead.
        if let recorder, options.replication == nil {
            recorder.enqueue(
                try storage.environment.read {
                    try LedgerSnapshot(txn: $0, schema: storage.schema).sendsWithoutAudience()
                })
        }
        if !options.forRebuild { try compaction.journalAtOpen() }
        if options.replication == nil && !options.forRebuild {
            try forgetClusterSuffix(storage)
            try reapplyJournaledErasures()
        }
    }

    /// On its own (no cluster), a ledger acknowledges every write it commits: a suffix a cluster's leader wrote
    /// ahead of etcd (``MetaKey/clusterHeld``) is from now on part of what this node answered for, and never
    /// rolled back (``rollBack(after:)``).
    private func forgetClusterSuffix(_ storage: LedgerStorage) throws {
        let schema = storage.schema
        let marked = try storage.environment.read { try $0.contains(schema.meta, key: MetaKey.clusterHeld) }
        guard marked else { return }
        try storage.environment.write { txn in _ = try txn.delete(schema.meta, key: MetaKey.clusterHeld) }
    }

    /// Applies again, through the writer, each erasure of the journal that this file does not hold: a file
    /// restored from a backup older than the erasure still names the device in its `registered` event (the
    /// same event: its hash is the journal's). The device gets its pseudonym again, in an `erased` event by
    /// `restore`. Called when a writer opens the ledger.
    private func reapplyJournaledErasures() throws {
        guard let writer else { return }
        let operations = try journaledErasuresNotHeld()
        guard !operations.isEmpty else { return }
        let receipt = try writer.submitAndWait(
            WriteRequest(actor: "restore", requestID: "erasures-journal", operations: operations)
        ).get()
        logger.notice(
            "erasures recorded since this ledger's copy was made were applied again",
            metadata: ["ledger.erasures": "\(receipt.outcomes.filter { $0.seq != nil }.count)"])
    }

    deinit { close() }

    /// Records the audiences still queued, finishes queued writes and stops the writer. Further appends fail
    /// with `.unavailable`.
    public func close() {
        audienceRecorder?.stop()
        writer?.stop()
    }

    /// After a replicated block is applied: released like any commit, its membership changes dated (every topic,
    /// at its last seq) and its sends handed to the observers.
    func notifyReplicated(through seq: UInt64, sends: [UInt64]) {
        release.release(ReleasedCommit(through: seq, sends: sends, changes: .everyTopic, unrecordedSends: []))
    }

    /// Waits until the head is at or past `seq` — committed here, or applied from the cluster's log — and returns
    /// `true`; `false` when `timeout` runs out (or the task is cancelled) first. Woken by the commit or the
    /// applied block that reaches it, not by polling.
    public func waitForHead(_ seq: UInt64, upTo timeout: Duration) async -> Bool {
        // What is stored now counts, whatever wrote it — but on a cluster's node only what the cluster holds.
        if options.replication == nil, let head = try? readLog({ try $0.head().seq }) {
            headWaiters.advance(to: head)
        }
        return await headWaiters.wait(for: seq, upTo: timeout)
    }

    /// The seq through which requests were answered, or blocks applied: the head, but on a cluster's leader
    /// that commits ahead of etcd (``ReplicationGate/commitsAhead``) only what etcd acknowledged. What is
    /// signed, delivered or named to a reader in another request stops here.
    public var acknowledgedSeq: UInt64 { headWaiters.level }

    /// Why this ledger can no longer be written (its data file was deleted or replaced under it), or `nil`.
    public var writeProblem: String? { dataFile?.problem }

    /// While a compaction is owed after an erasure: why the last one failed (for `/readyz`: freed pages of the
    /// file may still hold what was erased).
    public var compactionProblem: String? { compaction?.problem }

    /// While erasures committed here are not all in `erasures.jsonl` and their lines cannot be written: why. (A
    /// restore of an older backup would not apply those erasures again; the writer tries before each transaction.)
    public var erasureJournalProblem: String? { compaction?.journalProblem }

    /// How full the ledger's map is: the bytes of the file in use over the largest map it may grow to (a write
    /// that needs more fails: the ledger's disk is full). Read in a transaction, which holds the map lock: a
    /// compaction or a growth of the map replaces what it reads.
    public var mapUsedFraction: Double {
        get throws {
            let used = try environment.read { txn in txn.environment.usedBytes }
            return Double(used) / Double(max(1, environment.options.maximumMapSize))
        }
    }

    /// Group-commit counters since the ledger was opened (zero for read-only ledgers).
    public var writerStatistics: WriterStatistics { writer?.statistics ?? WriterStatistics() }

    // MARK: Writing

    /// Appends the request's events and returns once they are durable.
    ///
    /// Concurrent calls share one transaction (group commit). Each operation is checked against the state
    /// it meets and either appends one event or is rejected (see ``OperationOutcome``).
    ///
    /// - Throws: `StoreError` `.invalidArgument` (time before the head: nothing appended), `.unavailable`
    ///   (storage failed: nothing appended).
    public func append(_ request: WriteRequest) async throws -> WriteReceipt {
        guard let writer else {
            throw StoreError(.invalidArgument, "the ledger of \(project) is open read-only")
        }
        var request = request
        if request.operations.count >= Self.resolveTokensBeforeQueueing {
            request.resolvedInstances = resolvedInstances(of: request.operations)
        }
        return try await writer.submit(request)
    }

    /// Requests with at least this many operations have their tokens resolved to instance ids before they
    /// are queued, on the caller's thread, so that the single writer does not search the `tokens` tree for
    /// them (``WriteRequest/resolvedInstances``; under batchAdd that search was 11 % of the writer's
    /// samples). Below it a read transaction's fixed cost is worth more than the searches it saves, and a
    /// writer serving small requests is not the bottleneck.
    static let resolveTokensBeforeQueueing = 16

    /// Each operation's token's instance id in a snapshot read now (`nil` for none); empty when the snapshot
    /// cannot be read, leaving every lookup to the writer.
    func resolvedInstances(of operations: [LedgerOperation]) -> [InstanceID?] {
        (try? read { snapshot in try snapshot.instanceIDs(of: operations.map(\.token)) }) ?? []
    }

    // MARK: Reading

    /// Runs `body` on a consistent snapshot of the ledger.
    ///
    /// - Throws: `.rebuildRequired` while projections are incomplete, and what `body` throws.
    public func read<R>(_ body: (LedgerSnapshot) throws -> R) throws -> R {
        try environment.read { txn in
            let snapshot = LedgerSnapshot(txn: txn, schema: schema)
            try snapshot.requireCompleteProjections()
            return try body(snapshot)
        }
    }

    /// Runs `body` on a snapshot of the log alone, which is readable even while projections are rebuilt.
    public func readLog<R>(_ body: (LedgerSnapshot) throws -> R) throws -> R {
        try environment.read { txn in try body(LedgerSnapshot(txn: txn, schema: schema)) }
    }

    private static func interruptedRebuild(_ storage: LedgerStorage) throws -> UInt64? {
        try storage.environment.read { try LedgerSnapshot(txn: $0, schema: storage.schema).rebuildingThrough() }
    }
}
