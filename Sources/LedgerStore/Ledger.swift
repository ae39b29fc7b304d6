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
        /// Called on the writer thread after each group commit with (requests, operations, duration):
        /// for metrics. Must be quick and must not block.
        public var commitObserver: (@Sendable (Int, Int, Duration) -> Void)?
        /// Whether a writer appends the `audience` event of every send (SPEC §2.4), including sends a crash
        /// left without one. Off only for rebuilds and benchmarks of the bare write path.
        public var recordsAudiences = true
        /// A send to a token, or to a topic whose audience has at most this many recipients, gets its `audience`
        /// event in the send's own transaction (one commit, and on a cluster one etcd transaction, for both);
        /// a larger audience, and a condition's, is recorded after it by the recorder, so reading and hashing
        /// it never holds up the writer. 0: always after.
        /// Hashing 1,024 device numbers costs the writer about 0.1 ms (16,163 take 1.39 ms: docs/performance.md).
        public var inlineAudienceLimit = 1024
        /// Called on the writer thread with the seqs of the sends a transaction committed, once durable
        /// (delivery wakes the devices they are for). Must not block.
        public var sendObserver: (@Sendable ([UInt64]) -> Void)?
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
    private let committer: GroupCommitter?
    private let audienceRecorder: AudienceRecorder?
    /// Recent audiences' recipient digests, for the audience recorder and ``recordAudiences(of:time:)``.
    private let digestMemo = LockedValue(RecipientDigestMemo())
    /// When each topic's membership last changed, as the writer saw it (for the memo).
    private let topicChanges: TopicChangeTracker
    /// The writer's reference to the recorder (cleared on close: the recorder appends through the writer).
    private let recorderSlot: LockedValue<AudienceRecorder?>
    /// A compaction owed after an erasure (``compactionProblem``).
    let compactionDebt = CompactionDebt()
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

    /// Starts the writer (group commit) and the audience recorder on opened storage; nothing for readers.
    private init(storage: LedgerStorage, project: ProjectID, options: Options, logger: Logger) throws {
        self.project = project
        self.directory = storage.directory
        self.environment = storage.environment
        self.schema = storage.schema
        self.writerLock = storage.writerLock
        let dataPath = storage.directory + "/data.mdb"
        let dataFile = options.mode == .readWrite ? DataFileWatch(path: dataPath) : nil
        self.dataFile = dataFile
        self.options = options
        self.logger = logger
        let slot = LockedValue<AudienceRecorder?>(nil)
        self.recorderSlot = slot
        let head = try storage.environment.read { try LedgerSnapshot(txn: $0, schema: storage.schema).head().seq }
        let changes = TopicChangeTracker(head: head)
        self.topicChanges = changes
        let headWaiters = Watermark(head)
        self.headWaiters = headWaiters
        guard options.mode == .readWrite else {
            self.committer = nil
            self.audienceRecorder = nil
            return
        }
        let committer = Self.startWriter(
            storage: storage, options: options, logger: logger, recorderSlot: slot, changes: changes,
            dataFile: dataFile, debt: compactionDebt, headWaiters: headWaiters)
        self.committer = committer
        if options.recordsAudiences && !options.forRebuild {
            let recorder = Self.startRecorder(
                storage: storage, committer: committer, memo: digestMemo, changes: changes, logger: logger)
            slot.withLock { $0 = recorder }
            self.audienceRecorder = recorder
            // Sends a crash (or a rebuild) left without an audience get one now.
            if options.replication == nil {
                recorder.enqueue(
                    try storage.environment.read {
                        try LedgerSnapshot(txn: $0, schema: storage.schema).sendsWithoutAudience()
                    })
            }
        } else {
            self.audienceRecorder = nil
        }
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

    /// The single writer: each group-commit batch runs through ``commit(_:environment:schema:limits:moves:now:logger:)``;
    /// its membership changes are dated in `changes`, and then the sends it committed go to the audience
    /// recorder and the send observer.
    private static func startWriter(
        storage: LedgerStorage, options: Options, logger: Logger,
        recorderSlot slot: LockedValue<AudienceRecorder?>, changes: TopicChangeTracker,
        dataFile: DataFileWatch?, debt: CompactionDebt, headWaiters: Watermark
    ) -> GroupCommitter {
        let limits = options.limits
        let clock = options.clock
        let sendObserver = options.sendObserver
        let isolation = options.isolation
        let gate = options.replication
        let inlineAudienceLimit = options.recordsAudiences ? options.inlineAudienceLimit : 0
        return GroupCommitter(
            maximumBatchOperations: options.maximumBatchOperations, observer: options.commitObserver,
            state: WriterState()
        ) { [environment = storage.environment, schema = storage.schema, logger, slot] state, batch, respond in
            if let problem = dataFile?.problem {
                if !state.stopReported {
                    state.stopReported = true
                    logger.critical("ledger writes stopped", metadata: ["error": "\(problem)"])
                }
                return respond(batch.map { _ in .failure(StoreError(.unavailable, problem)) })
            }
            if debt.problem != nil {
                do {
                    try Self.compactFile(environment, dataFile: dataFile, debt: debt)
                    state.instances.forget()
                    logger.notice("compacted the ledger's file after an earlier erasure")
                } catch {
                    return respond(
                        batch.map { _ in
                            .failure(
                                StoreError(
                                    .unavailable,
                                    "the ledger's file must be compacted after an erasure first, and cannot be: \(error)"
                                ))
                        })
                }
            }
            let erases = batch.count == 1 && batch[0].erases
            // What the requests were told is what happened: only what the cluster holds (when the batch
            // committed ahead of it) raises the head, dates topic changes and reaches the recorder.
            let release: @Sendable (GroupCommitter.Results) -> Void = { results in
                if let last = Self.lastSeq(in: results) {
                    headWaiters.advance(to: last)
                    // Before the sends reach the recorder: a send's audience must never be taken as unchanged
                    // across a change committed before it (``TopicChangeTracker``).
                    changes.noteChanges(of: batch, through: last)
                }
                let sends = Self.sends(in: results)
                if !sends.isEmpty {
                    let unrecorded = Self.sends(in: results, withoutAudienceOnly: true)
                    if !unrecorded.isEmpty { slot.withLock { $0?.enqueue(unrecorded) } }
                    sendObserver?(sends.map(\.sendSeq))
                }
                respond(results)
            }
            let acknowledgement = gate.flatMap { gate in
                gate.commitsAhead && !erases ? AheadAcknowledgement(gate: gate, release: release) : nil
            }
            let handOver: (ReplicatedBlock, [Int]) -> Void = { block, requests in
                acknowledgement?.handOver(block, requests: requests)
            }
            let committed =
                switch isolation {
                case .retryAlone:
                    Self.commit(
                        batch, environment: environment, schema: schema, limits: limits, moves: state.moveCursor,
                        facts: state.instances, chainWorker: state.chainWorker, gate: gate,
                        ahead: acknowledgement.map { _ in handOver }, inlineAudienceLimit: inlineAudienceLimit,
                        now: clock(), logger: logger)
                case .nestedPerRequest:
                    Self.commitNested(
                        batch, environment: environment, schema: schema, limits: limits, moves: state.moveCursor,
                        facts: state.instances, chainWorker: state.chainWorker, gate: gate,
                        ahead: acknowledgement.map { _ in handOver }, inlineAudienceLimit: inlineAudienceLimit,
                        now: clock(), logger: logger)
                }
            if erases, case .success(let receipt) = committed.results[0],
                receipt.outcomes.contains(where: { $0.seq != nil })
            {
                if let last = Self.lastSeq(in: committed.results) { headWaiters.advance(to: last) }
                return respond([
                    Self.compact(
                        after: receipt, environment: environment, dataFile: dataFile, state: &state, debt: debt,
                        logger: logger)
                ])
            }
            guard let acknowledgement, let gate else { return release(committed.results) }
            acknowledgement.finish(committed.results)
            // After the blocks this batch did commit were handed over: they are written before the lead ends.
            if let failure = committed.storageFailure { gate.commitFailed(failure) }
        }
    }

    /// After an erasure commits, on the writer's thread: rewrites the file with its live pages only, so that no
    /// freed page keeps what was erased (``LMDBEnvironment/compact()``), and only then answers. When that
    /// fails the erasure stands (it is durable) but the request is told the file still holds the old bytes,
    /// and the writer compacts again before its next transaction (``CompactionDebt``).
    private static func compact(
        after receipt: WriteReceipt, environment: LMDBEnvironment, dataFile: DataFileWatch?, state: inout WriterState,
        debt: CompactionDebt, logger: Logger
    ) -> Result<WriteReceipt, any Error> {
        let start = ContinuousClock.now
        do {
            try ErasureJournal.append(
                try environment.read { txn in
                    try Self.journalEntries(of: receipt, in: LedgerSnapshot(txn: txn, schema: LedgerSchema(txn)))
                }, directory: environment.path)
        } catch {
            logger.critical(
                "an erasure is recorded in the log but not in erasures.jsonl: a restore of an older backup would not apply it again",
                metadata: ["error": "\(error)"])
        }
        do {
            try compactFile(environment, dataFile: dataFile, debt: debt)
            state.instances.forget()
            logger.notice(
                "erased devices' identifiers and compacted the ledger's file",
                metadata: [
                    "ledger.erased": "\(receipt.outcomes.filter { $0.seq != nil }.count)",
                    "ledger.compaction.duration": "\(ContinuousClock.now - start)",
                ])
            return .success(receipt)
        } catch {
            logger.critical(
                """
                an erasure is recorded, but the ledger's file could not be compacted: freed pages may still hold \
                what was erased until the next compaction
                """,
                metadata: ["error": "\(error)"])
            return .failure(
                StoreError(
                    .unavailable,
                    "the erasure is recorded, but the ledger's file could not be compacted yet; it will be before the"
                        + " next write"))
        }
    }

    /// After a replicated block with `erased` events at `seqs` was applied (a follower): journals them and
    /// compacts the file, as the leader did for its copy. A failed compaction is owed (``compactionProblem``)
    /// and tried again after the next block applied (``compactIfOwed()``).
    func compactAfterErasures(at seqs: [UInt64]) {
        do {
            try ErasureJournal.append(
                try read { try Self.journalEntries(of: seqs, in: $0) }, directory: directory)
        } catch {
            logger.critical(
                "a replicated erasure is applied but not in erasures.jsonl: a restore of an older backup would not apply it again",
                metadata: ["error": "\(error)"])
        }
        do {
            try Self.compactFile(environment, dataFile: dataFile, debt: compactionDebt)
            logger.notice(
                "applied a replicated erasure to this copy and compacted its file",
                metadata: ["ledger.erased": "\(seqs.count)"])
        } catch {
            logger.critical(
                """
                a replicated erasure is applied, but this copy's file could not be compacted: freed pages may still \
                hold what was erased until the next compaction, tried after the next block
                """,
                metadata: ["error": "\(error)"])
        }
    }

    /// A follower's retry of a compaction owed after an erasure (``compactAfterErasures(at:)``).
    func compactIfOwed() {
        guard compactionDebt.problem != nil,
            (try? Self.compactFile(environment, dataFile: dataFile, debt: compactionDebt)) != nil
        else { return }
        logger.notice("compacted this copy's file after an earlier erasure")
    }

    /// Rewrites the file with its live pages only (``LMDBEnvironment/compact()``) and adopts the new file's
    /// identity; `debt` is settled, or owed the error, which is rethrown.
    private static func compactFile(_ environment: LMDBEnvironment, dataFile: DataFileWatch?, debt: CompactionDebt)
        throws
    {
        do {
            try environment.compact()
            dataFile?.adopt()
            debt.settle()
        } catch {
            debt.owe(because: error)
            throw error
        }
    }

    /// While a compaction is owed after an erasure: why the last one failed (for `/readyz`: freed pages of the
    /// file may still hold what was erased).
    public var compactionProblem: String? { compactionDebt.problem }

    /// The journal lines of the erasures `receipt` appended.
    private static func journalEntries(of receipt: WriteReceipt, in snapshot: LedgerSnapshot) throws
        -> [ErasureJournal.Entry]
    {
        try journalEntries(of: receipt.outcomes.compactMap(\.seq), in: snapshot)
    }

    /// The journal lines of the `erased` events at `seqs`.
    private static func journalEntries(of seqs: [UInt64], in snapshot: LedgerSnapshot) throws
        -> [ErasureJournal.Entry]
    {
        try seqs.compactMap { seq in
            guard let event = try snapshot.event(at: seq), case .erased(let erasure) = event.body,
                let registeredHash = try snapshot.hash(at: erasure.registeredSeq)
            else { return nil }
            return ErasureJournal.Entry(
                seq: seq, time: event.time.rfc3339, actor: event.actor, reason: erasure.reason,
                pseudonym: erasure.pseudonym.rawValue, registeredSeq: erasure.registeredSeq,
                registeredHash: Hex.encode(registeredHash))
        }
    }

    /// Applies again, through the writer, each erasure of the journal that this file does not hold: a file
    /// restored from a backup older than the erasure still names the device in its `registered` event (the
    /// same event: its hash is the journal's). The device gets its pseudonym again, in an `erased` event by
    /// `restore`. Called when a writer opens the ledger.
    private func reapplyJournaledErasures() throws {
        guard let committer else { return }
        // An erasure applied again is journaled again: the first line of each device is its erasure.
        var seen = Set<UInt64>()
        let entries = ErasureJournal.read(directory: directory).filter { seen.insert($0.registeredSeq).inserted }
        guard !entries.isEmpty else { return }
        let operations: [LedgerOperation] = try read { snapshot in
            try entries.compactMap { entry in
                guard entry.registeredSeq > 0,
                    let hash = try snapshot.hash(at: entry.registeredSeq), Hex.encode(hash) == entry.registeredHash,
                    let event = try snapshot.event(at: entry.registeredSeq),
                    case .registered(let token, _, _) = event.body, !Erasure.isPseudonym(token),
                    let pseudonym = try? RegistrationToken(entry.pseudonym), Erasure.isPseudonym(pseudonym)
                else { return nil }
                return .erase(token, reason: "applied again after a restore: " + entry.reason, pseudonym: pseudonym)
            }
        }
        guard !operations.isEmpty else { return }
        let receipt = try committer.submitAndWait(
            WriteRequest(actor: "restore", requestID: "erasures-journal", operations: operations)
        ).get()
        logger.notice(
            "erasures recorded since this ledger's copy was made were applied again",
            metadata: ["ledger.erasures": "\(receipt.outcomes.filter { $0.seq != nil }.count)"])
    }

    /// Computes each committed send's audience on its own thread and appends it through the writer.
    private static func startRecorder(
        storage: LedgerStorage, committer: GroupCommitter, memo: LockedValue<RecipientDigestMemo>,
        changes: TopicChangeTracker, logger: Logger
    ) -> AudienceRecorder {
        AudienceRecorder(
            compute: { [environment = storage.environment, schema = storage.schema] sends in
                try memo.withLock { memo in
                    try environment.read {
                        try LedgerSnapshot(txn: $0, schema: schema).audienceRecords(sends, memo: memo, changes: changes)
                    }
                }
            },
            submit: { request in committer.submitAndWait(request) }, logger: logger)
    }

    /// The last seq appended by `results`, or `nil` when they appended nothing.
    private static func lastSeq(in results: [Result<WriteReceipt, any Error>]) -> UInt64? {
        var last: UInt64?
        for case .success(let receipt) in results {
            for outcome in receipt.outcomes {
                if let seq = outcome.seq { last = max(last ?? seq, seq) }
            }
            for seq in receipt.recordedAudiences.values { last = max(last ?? seq, seq) }
        }
        return last
    }

    /// The sends committed in `results`; with `withoutAudienceOnly`, those whose audience was not recorded
    /// with them (``WriteReceipt/recordedAudiences``).
    private static func sends(
        in results: [Result<WriteReceipt, any Error>], withoutAudienceOnly: Bool = false
    ) -> [PendingAudience] {
        var sends: [PendingAudience] = []
        for case .success(let receipt) in results {
            for case .sent(let seq, let messageID) in receipt.outcomes
            where !withoutAudienceOnly || receipt.recordedAudiences[messageID] == nil {
                sends.append(PendingAudience(messageID: messageID, sendSeq: seq))
            }
        }
        return sends
    }

    deinit { close() }

    /// Records the audiences still queued, finishes queued writes and stops the writer. Further appends fail
    /// with `.unavailable`.
    public func close() {
        audienceRecorder?.stop()
        committer?.stop()
        recorderSlot.withLock { $0 = nil }
    }

    /// Gives every send without an `audience` event one (``Options/replication``: what a node does when it
    /// takes the lead of the project; a ledger of one node does it when it opens).
    public func recordMissingAudiences() throws {
        guard let audienceRecorder else { return }
        audienceRecorder.enqueue(try read { try $0.sendsWithoutAudience() })
    }

    /// After a replicated block is applied: its membership changes dated (every topic, at its last seq) and
    /// its sends handed to the send observer.
    func notifyReplicated(through seq: UInt64, sends: [UInt64]) {
        topicChanges.noteChangesOfEveryTopic(through: seq)
        headWaiters.advance(to: seq)
        if !sends.isEmpty { options.sendObserver?(sends) }
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

    /// Blocks until every send committed so far has its `audience` event (or its recording failed and was
    /// logged). For imports, tests and benchmarks; the server never needs to wait.
    public func waitForAudiences() {
        audienceRecorder?.waitUntilIdle()
    }

    // MARK: Writing

    /// Appends the request's events and returns once they are durable.
    ///
    /// Concurrent calls share one transaction (group commit). Each operation is checked against the state
    /// it meets and either appends one event or is rejected (see ``OperationOutcome``).
    ///
    /// - Throws: `StoreError` `.invalidArgument` (time before the head: nothing appended), `.unavailable`
    ///   (storage failed: nothing appended).
    public func append(_ request: WriteRequest) async throws -> WriteReceipt {
        guard let committer else {
            throw StoreError(.invalidArgument, "the ledger of \(project) is open read-only")
        }
        var request = request
        if request.operations.count >= Self.resolveTokensBeforeQueueing {
            request.resolvedInstances = resolvedInstances(of: request.operations)
        }
        return try await committer.submit(request)
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

    /// Runs one group-commit batch in one write transaction: every request's events, projection changes
    /// and the head commit together, or nothing does.
    ///
    /// Refusals and rejections are values (see ``LogAppender/apply(_:now:)``); anything thrown aborts the
    /// whole transaction — and LMDBKit never commits a transaction in which an LMDB call failed, even if the
    /// error was caught. A full map is grown and the batch run again (``LMDBEnvironment/write(_:)``). When the
    /// batch fails otherwise, each request is retried alone, so only the request that fails fails, with
    /// nothing written for it. `facts` learn from every transaction and are told which committed
    /// (``WriterInstanceCache``). With `ahead`, the cluster's `gate` admits each block in its transaction, and
    /// each block committed is given to `ahead` with the indices of its requests at once — before the next
    /// transaction, so that each block the gate admits follows the last one handed over
    /// (``ReplicationGate/commitsAhead``).
    static func commit(
        _ batch: [WriteRequest], environment: LMDBEnvironment, schema: LedgerSchema, limits: LedgerLimits,
        moves: RecentMemberships.MoveCursor, facts: WriterInstanceCache, chainWorker: SerialWorker<BlockingJob, Void>,
        gate: (any ReplicationGate)? = nil, ahead: ((ReplicatedBlock, [Int]) -> Void)? = nil,
        inlineAudienceLimit: Int = 0, now: LedgerTime, logger: Logger
    ) -> CommittedBatch {
        let directory = environment.path
        func run(_ requests: [WriteRequest]) throws -> ([Result<WriteReceipt, any Error>], ReplicatedBlock?) {
            let (results, transaction, block) = try environment.write { txn in
                facts.begin(transaction: txn.id)
                var appender = try LogAppender(
                    txn: txn, schema: schema, limits: limits, facts: facts, chainWorker: chainWorker,
                    messageIDs: SystemRandomNumberGenerator())
                let start = appender.head
                if gate != nil { appender.sink.replicatedRecords = [] }
                var results: [Result<WriteReceipt, any Error>] = []
                results.reserveCapacity(requests.count)
                for request in requests {
                    results.append(try appender.apply(request, now: now).mapError { $0 })
                }
                try finish(&appender, txn: txn, schema: schema, limits: limits, moves: moves, facts: facts)
                var records = appender.sink.replicatedRecords ?? []
                if let audiences = try appendSmallAudiences(
                    of: &results, limit: inlineAudienceLimit, txn: txn, schema: schema, limits: limits, moves: moves,
                    facts: facts, chainWorker: chainWorker, replicated: gate != nil, now: now, logger: logger)
                {
                    records += audiences
                }
                let block = try gate.map { gate in
                    try pass(gate, ahead: ahead != nil, start: start, records: records, txn: txn, schema: schema)
                }
                return (results, txn.id, block ?? nil)
            }
            facts.committed(transaction: transaction)
            return (results, block)
        }
        do {
            let (results, block) = try run(batch)
            if let block { ahead?(block, Array(batch.indices)) }
            return CommittedBatch(results: results)
        } catch let refusal as ReplicationRefusal {
            // Retrying alone would be refused the same way, once per request. (The facts learnt in the aborted
            // transaction are forgotten when the next one begins: ``WriterInstanceCache/begin(transaction:)``.)
            return CommittedBatch(failing: batch.count, with: Self.refused(refusal))
        } catch {
            guard batch.count > 1 else {
                logger.error(
                    "ledger write failed; nothing was written",
                    metadata: ["ledger.request": "\(batch[0].requestID)", "error": "\(error)"])
                var committed = CommittedBatch(failing: 1, with: storageError(error, directory: directory))
                committed.noteFailure(error)
                return committed
            }
            logger.warning(
                "ledger batch failed; retrying its requests one by one",
                metadata: ["ledger.batch.requests": "\(batch.count)", "error": "\(error)"])
            var committed = CommittedBatch(results: [])
            for (index, request) in batch.enumerated() {
                do {
                    let (results, block) = try run([request])
                    committed.results.append(results[0])
                    if let block { ahead?(block, [index]) }
                } catch let refusal as ReplicationRefusal {
                    committed.results.append(.failure(Self.refused(refusal)))
                } catch {
                    logger.error(
                        "ledger write failed; nothing was written",
                        metadata: ["ledger.request": "\(request.requestID)", "error": "\(error)"])
                    committed.noteFailure(error)
                    committed.results.append(.failure(storageError(error, directory: directory)))
                }
            }
            return committed
        }
    }

    /// Hands what a transaction appended since `start` to `gate` (or, when it appended nothing, has it
    /// confirm the leadership): the last step before LMDB commits. Ahead of the cluster, the gate only admits
    /// the block, the transaction notes what the cluster held then (``MetaKey/clusterHeld``), and the block is
    /// returned, to be handed over once LMDB committed it.
    private static func pass(
        _ gate: any ReplicationGate, ahead: Bool, start: LedgerHead, records: [[UInt8]], txn: LMDBTransaction,
        schema: LedgerSchema
    ) throws -> ReplicatedBlock? {
        let block = ReplicatedBlock(firstSeq: start.seq + 1, previousHash: start.hash, records: records)
        if ahead {
            let held = try gate.admitAhead(block)
            if !records.isEmpty { try txn.put(schema.meta, key: MetaKey.clusterHeld, value: held) }
            return block
        }
        if records.isEmpty {
            try gate.confirmLeadership()
        } else {
            try gate.replicate(block)
        }
        return nil
    }

    /// What the requests of a batch the cluster refused are told: unavailable, nothing written.
    static func refused(_ refusal: ReplicationRefusal) -> StoreError {
        StoreError(.unavailable, "the cluster did not accept the write; nothing was written: \(refusal.message)")
    }

    /// Ends a transaction's appending: moves recent memberships if they are due while the chainer (if any)
    /// chains the last events — the writer would otherwise wait for it — then stores the log's records, the
    /// tree's subtrees and the head.
    static func finish(
        _ appender: inout LogAppender<MemoizedProjection, TransactionSink>, txn: LMDBTransaction,
        schema: LedgerSchema, limits: LedgerLimits, moves: RecentMemberships.MoveCursor, facts: WriterInstanceCache
    ) throws {
        appender.sink.submitPending()
        try RecentMemberships.moveIfFull(
            txn: txn, schema: schema, limit: limits.recentMembershipsBeforeMove, cursor: moves,
            moved: { facts.recentMoved($0) })
        try appender.finish()
    }

    /// ``RequestIsolation/nestedPerRequest``: each request in a child transaction of the batch's one; a failed
    /// child is discarded alone, and with it `facts` (which may hold what it learnt). A full map still aborts
    /// the whole batch, which is grown and run again.
    static func commitNested(
        _ batch: [WriteRequest], environment: LMDBEnvironment, schema: LedgerSchema, limits: LedgerLimits,
        moves: RecentMemberships.MoveCursor, facts: WriterInstanceCache, chainWorker: SerialWorker<BlockingJob, Void>,
        gate: (any ReplicationGate)? = nil, ahead: ((ReplicatedBlock, [Int]) -> Void)? = nil,
        inlineAudienceLimit: Int = 0, now: LedgerTime, logger: Logger
    ) -> CommittedBatch {
        do {
            let (results, transaction, block) = try environment.write { txn in
                facts.begin(transaction: txn.id)
                var results: [Result<WriteReceipt, any Error>] = []
                results.reserveCapacity(batch.count)
                var start: LedgerHead?
                var records: [[UInt8]] = []
                for request in batch {
                    do {
                        results.append(
                            try txn.nested { child in
                                var appender = try LogAppender(
                                    txn: child, schema: schema, limits: limits, facts: facts,
                                    chainWorker: chainWorker, messageIDs: SystemRandomNumberGenerator())
                                if start == nil { start = appender.head }
                                if gate != nil { appender.sink.replicatedRecords = [] }
                                let result = try appender.apply(request, now: now)
                                try finish(
                                    &appender, txn: child, schema: schema, limits: limits, moves: moves, facts: facts)
                                records += appender.sink.replicatedRecords ?? []
                                return result.mapError { $0 }
                            })
                    } catch LMDBError.Code.mapFull {
                        throw LMDBError(code: .mapFull, function: "mdb_put")
                    } catch {
                        facts.forget()
                        logger.error(
                            "ledger write failed; nothing was written",
                            metadata: ["ledger.request": "\(request.requestID)", "error": "\(error)"])
                        results.append(.failure(storageError(error, directory: environment.path)))
                    }
                }
                if let audiences = try appendSmallAudiences(
                    of: &results, limit: inlineAudienceLimit, txn: txn, schema: schema, limits: limits, moves: moves,
                    facts: facts, chainWorker: chainWorker, replicated: gate != nil, now: now, logger: logger)
                {
                    records += audiences
                }
                var block: ReplicatedBlock?
                if let gate, let start {
                    block = try pass(
                        gate, ahead: ahead != nil, start: start, records: records, txn: txn, schema: schema)
                }
                return (results, txn.id, block)
            }
            facts.committed(transaction: transaction)
            if let block { ahead?(block, Array(batch.indices)) }
            return CommittedBatch(results: results)
        } catch let refusal as ReplicationRefusal {
            return CommittedBatch(failing: batch.count, with: Self.refused(refusal))
        } catch {
            logger.error("ledger batch failed; nothing was written", metadata: ["error": "\(error)"])
            var committed = CommittedBatch(failing: batch.count, with: storageError(error, directory: environment.path))
            committed.noteFailure(error)
            return committed
        }
    }

    /// What a caller is told when a write failed: always `.unavailable` with nothing written, and no LMDB
    /// internals (the log line beside it has them).
    package static func storageError(_ error: any Error, directory: String) -> StoreError {
        if let error = error as? StoreError, error.code != .corrupt { return error }
        switch error {
        case LMDBError.Code.noSpace, LMDBError.Code.mapFull:
            return StoreError(.unavailable, "the ledger's disk is full; nothing was written")
        // LMDB reports a short write (what a full disk gives mid-page) as EIO.
        case LMDBError.Code.ioError where FileSystemSpace.availableBytes(at: directory).map({ $0 < 1 << 20 }) == true:
            return StoreError(.unavailable, "the ledger's disk is full; nothing was written")
        default:
            return StoreError(.unavailable, "the ledger could not be written; nothing was written")
        }
    }

    /// Appends the `audience` events of the sends in `receipt` at once, stamped `time` (the store's clock
    /// when `nil`), and returns their outcomes. For ledgers opened without
    /// ``Options/recordsAudiences`` that still want every send recorded in a deterministic place: `ledger
    /// import` records each send's audience right after its request, with the request's time.
    @discardableResult
    public func recordAudiences(of receipt: WriteReceipt, time: LedgerTime?) async throws -> [OperationOutcome] {
        let sends = Self.sends(in: [.success(receipt)], withoutAudienceOnly: true)
        guard !sends.isEmpty else { return [] }
        // A reader's change dates miss what another process writes: nothing is computed for it (the append
        // below would refuse it anyway).
        guard committer != nil else {
            throw StoreError(.invalidArgument, "the ledger of \(project) is open read-only")
        }
        let records = try digestMemo.withLock { memo in
            try read { try $0.audienceRecords(sends, memo: memo, changes: topicChanges) }
        }
        return try await append(
            WriteRequest(
                actor: "ledger", requestID: "audience-\(RequestID.random())", time: time,
                operations: records.map { .recordAudience($0) })
        ).outcomes
    }

    /// Sends committed whose `audience` event is not appended yet (0 without the recorder).
    public var pendingAudiences: Int { audienceRecorder?.backlog ?? 0 }

    /// How many recorded audiences reused the recipient digest of an earlier send to the same target with
    /// exactly the same members (``RecipientDigestMemo``) — `unread` of them without reading the members,
    /// since none had changed — and how many were hashed from the tokens.
    public var audienceDigestReuse: (reused: Int, unread: Int, hashed: Int) {
        digestMemo.withLock { ($0.hits + $0.unreadHits, $0.unreadHits, $0.misses) }
    }

    /// Why this ledger can no longer be written (its data file was deleted or replaced under it), or `nil`.
    public var writeProblem: String? { dataFile?.problem }

    /// Group-commit counters since the ledger was opened (zero for read-only ledgers).
    public var writerStatistics: WriterStatistics { committer?.currentStatistics ?? WriterStatistics() }

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

    /// Writes a consistent hot copy of this ledger to `<destination>/<project>/data.mdb`, compacted, while
    /// writers go on; the copy opens like any ledger (`--data destination`).
    ///
    /// The copy is written under a hidden temporary name beside the target, flushed to disk, and renamed into
    /// place only when whole: a backup that fails (a full disk) or is interrupted never takes the target's
    /// name, so a `<project>/data.mdb` in a backup directory is always a complete copy. (LMDB's copy itself
    /// does not sync.)
    ///
    /// - Throws: `.invalidArgument` when the destination already holds this project's ledger;
    ///   `.unavailable` when it cannot be written (nothing is left behind).
    public func backup(to destination: String) throws {
        let target = (destination as NSString).appendingPathComponent(project.rawValue)
        guard !FileManager.default.fileExists(atPath: target + "/data.mdb") else {
            throw StoreError(.invalidArgument, "\(target) already holds a ledger; choose an empty destination")
        }
        let partial = (destination as NSString).appendingPathComponent(
            ".\(project.rawValue).partial-\(UUID().uuidString)")
        do {
            try FileManager.default.createDirectory(
                atPath: partial, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            try environment.copy(to: partial)
            try syncPath(partial + "/data.mdb")
            try syncPath(partial)
            // rename(2) replaces a target that is an empty directory, and fails on one that holds anything.
            guard rename(partial, target) == 0 else {
                throw StoreError(
                    .unavailable, "cannot rename the finished copy into place: \(String(cString: strerror(errno)))")
            }
            try syncPath(destination)
        } catch {
            try? FileManager.default.removeItem(atPath: partial)
            throw StoreError(.unavailable, "cannot write the backup to \(target): \(error)")
        }
    }

    private static func interruptedRebuild(_ storage: LedgerStorage) throws -> UInt64? {
        try storage.environment.read { try LedgerSnapshot(txn: $0, schema: storage.schema).rebuildingThrough() }
    }
}

extension LedgerTime {
    /// The current time from the system clock.
    public static func now() -> LedgerTime {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return LedgerTime(microseconds: Int64(spec.tv_sec) * 1_000_000 + Int64(spec.tv_nsec) / 1000)
    }
}
