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
        /// Open for writing even though a rebuild was interrupted (only `rebuildProjections` should).
        public var forRebuild = false
        /// Called on the writer thread after each group commit with (requests, operations, duration):
        /// for metrics. Must be quick and must not block.
        public var commitObserver: (@Sendable (Int, Int, Duration) -> Void)?
        /// Whether a writer appends the `audience` event of every send (SPEC §2.4), including sends a crash
        /// left without one. Off only for rebuilds and benchmarks of the bare write path.
        public var recordsAudiences = true
        /// Called on the writer thread with the seqs of the sends a transaction committed, once durable
        /// (delivery wakes the devices they are for). Must not block.
        public var sendObserver: (@Sendable ([UInt64]) -> Void)?

        public init(mode: Mode = .readWrite) { self.mode = mode }
    }

    public let project: ProjectID
    /// The directory holding this project's LMDB environment.
    public let directory: String
    let environment: LMDBEnvironment
    let schema: LedgerSchema
    let options: Options
    let logger: Logger
    private let writerLock: WriterLock?
    private let committer: GroupCommitter?
    private let audienceRecorder: AudienceRecorder?
    /// The writer's reference to the recorder (cleared on close: the recorder appends through the writer).
    private let recorderSlot: RecorderSlot

    /// Opens the ledger of `project` under `dataDirectory`, creating it when opened for writing.
    ///
    /// - Throws: `StoreError` `.locked` (another process writes it), `.notFound` (read-only and absent),
    ///   `.incompatible` (written by another layout or for another project), `.rebuildRequired` (an
    ///   interrupted rebuild, for writers), `.unavailable` (I/O).
    public static func open(
        dataDirectory: String, project: ProjectID, options: Options = Options(), logger: Logger
    ) throws -> Ledger {
        try Ledger(dataDirectory: dataDirectory, project: project, options: options, logger: logger)
    }

    private init(dataDirectory: String, project: ProjectID, options: Options, logger: Logger) throws {
        let directory = (dataDirectory as NSString).appendingPathComponent(project.rawValue)
        let readOnly = options.mode == .readOnly
        if readOnly {
            guard FileManager.default.fileExists(atPath: directory + "/data.mdb") else {
                throw StoreError(.notFound, "no ledger for project \(project) in \(dataDirectory)")
            }
        } else {
            do {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            } catch {
                throw StoreError(.unavailable, "cannot create \(directory): \(error.localizedDescription)")
            }
        }
        self.writerLock = readOnly ? nil : try WriterLock(directory: directory)
        var environmentOptions = options.environment
        environmentOptions.readOnly = readOnly
        let environment: LMDBEnvironment
        do {
            environment = try LMDBEnvironment(path: directory, options: environmentOptions)
        } catch {
            throw StoreError(.unavailable, "cannot open the ledger in \(directory): \(error)")
        }
        let schema: LedgerSchema
        if readOnly {
            do {
                schema = try environment.read { try LedgerSchema($0) }
            } catch LMDBError.Code.notFound {
                throw StoreError(
                    .incompatible,
                    "the ledger in \(directory) has an older store layout; open it once with a writer (`ledger serve`"
                        + " or `ledger rebuild`) to upgrade it")
            }
        } else {
            schema = try environment.write { txn in
                let schema = try LedgerSchema(txn)
                if try !txn.contains(schema.meta, key: MetaKey.layoutVersion) {
                    try txn.put(schema.meta, key: MetaKey.layoutVersion, value: LedgerSchema.layoutVersion)
                    try txn.put(schema.meta, key: MetaKey.project, value: project.rawValue)
                }
                try Self.upgradeLayout(txn, schema)
                return schema
            }
        }
        try environment.read { txn in
            let version = try txn.withValue(in: schema.meta, forKey: MetaKey.layoutVersion) {
                $0?.loadBigEndianUInt32()
            }
            guard version == LedgerSchema.layoutVersion else {
                throw StoreError(
                    .incompatible,
                    "the ledger in \(directory) has store layout \(version.map(String.init) ?? "none"); this build reads"
                        + " layout \(LedgerSchema.layoutVersion)")
            }
            let storedProject = try txn.value(in: schema.meta, forKey: MetaKey.project).map {
                String(decoding: $0, as: UTF8.self)
            }
            guard storedProject == project.rawValue else {
                throw StoreError(
                    .incompatible,
                    "the ledger in \(directory) belongs to project \(storedProject ?? "?"), not \(project)")
            }
        }
        self.project = project
        self.directory = directory
        self.environment = environment
        self.schema = schema
        self.options = options
        self.logger = logger
        let slot = RecorderSlot()
        self.recorderSlot = slot
        if readOnly {
            self.committer = nil
            self.audienceRecorder = nil
            return
        }
        if !options.forRebuild, let through = try Self.interruptedRebuild(environment, schema) {
            throw StoreError(
                .rebuildRequired,
                "a rebuild of \(directory) stopped after seq \(through); run `ledger rebuild` before writing")
        }
        let limits = options.limits
        let clock = options.clock
        let recordsAudiences = options.recordsAudiences && !options.forRebuild
        let sendObserver = options.sendObserver
        // The writer hands each committed send to the recorder; the recorder appends through the writer.
        let committer = GroupCommitter(
            maximumBatchOperations: options.maximumBatchOperations, observer: options.commitObserver
        ) {
            [environment, schema, logger, slot] batch in
            let results = Self.commit(
                batch, environment: environment, schema: schema, limits: limits, now: clock(), logger: logger)
            let sends = Self.sends(in: results)
            if !sends.isEmpty {
                slot.recorder?.enqueue(sends)
                sendObserver?(sends.map(\.sendSeq))
            }
            return results
        }
        self.committer = committer
        if recordsAudiences {
            let recorder = AudienceRecorder(
                compute: { [environment, schema] sends in
                    try environment.read { try LedgerSnapshot(txn: $0, schema: schema).audienceRecords(sends) }
                },
                submit: { request in
                    let done = DispatchSemaphore(value: 0)
                    let box = ResultBox()
                    committer.enqueue(request) { result in
                        box.result = result
                        done.signal()
                    }
                    done.wait()
                    return box.result!
                }, logger: logger)
            slot.recorder = recorder
            self.audienceRecorder = recorder
            // Sends a crash (or a rebuild) left without an audience get one now.
            if !options.forRebuild {
                recorder.enqueue(
                    try environment.read { try LedgerSnapshot(txn: $0, schema: schema).sendsWithoutAudience() })
            }
        } else {
            self.audienceRecorder = nil
        }
    }

    /// The sends committed in `results`.
    private static func sends(in results: [Result<WriteReceipt, any Error>]) -> [PendingAudience] {
        var sends: [PendingAudience] = []
        for case .success(let receipt) in results {
            for case .sent(let seq, let messageID) in receipt.outcomes {
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
        recorderSlot.recorder = nil
    }

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
        return try await committer.submit(request)
    }

    /// Runs one group-commit batch in one transaction. If the transaction fails for the batch, each request
    /// is retried alone so that one bad request cannot fail its neighbours.
    private static func commit(
        _ batch: [WriteRequest], environment: LMDBEnvironment, schema: LedgerSchema, limits: LedgerLimits,
        now: LedgerTime, logger: Logger
    ) -> [Result<WriteReceipt, any Error>] {
        func run(_ requests: [WriteRequest]) throws -> [Result<WriteReceipt, any Error>] {
            try environment.write { txn in
                var appender = try LogAppender(
                    txn: txn, schema: schema, limits: limits, messageIDs: SystemRandomNumberGenerator())
                let results = requests.map { request in Result { try appender.apply(request, now: now) } }
                try appender.finish()
                return results
            }
        }
        do {
            return try run(batch)
        } catch {
            logger.error(
                "ledger write failed", metadata: ["ledger.batch.requests": "\(batch.count)", "error": "\(error)"])
            if batch.count > 1 {
                return batch.map { request in
                    do {
                        return try run([request])[0]
                    } catch {
                        return .failure(storageError(error))
                    }
                }
            }
            return [.failure(storageError(error))]
        }
    }

    private static func storageError(_ error: any Error) -> any Error {
        if error is StoreError { return error }
        if let lmdb = error as? LMDBError, lmdb.code == .noSpace || lmdb.code == .mapFull {
            return StoreError(.unavailable, "the ledger's disk is full; nothing was written")
        }
        return StoreError(.unavailable, "the ledger could not be written (\(error)); nothing was written")
    }

    /// Appends the `audience` events of the sends in `receipt` at once, stamped `time` (the store's clock
    /// when `nil`), and returns their outcomes. For ledgers opened without
    /// ``Options/recordsAudiences`` that still want every send recorded in a deterministic place: `ledger
    /// import` records each send's audience right after its request, with the request's time.
    @discardableResult
    public func recordAudiences(of receipt: WriteReceipt, time: LedgerTime?) async throws -> [OperationOutcome] {
        let sends = Self.sends(in: [.success(receipt)])
        guard !sends.isEmpty else { return [] }
        let records = try read { try $0.audienceRecords(sends) }
        return try await append(
            WriteRequest(
                actor: "ledger", requestID: "audience-\(UUID().uuidString.lowercased())", time: time,
                operations: records.map { .recordAudience($0) })
        ).outcomes
    }

    /// Group-commit counters since the ledger was opened (zero for read-only ledgers).
    public var writerStatistics: WriterStatistics { committer?.currentStatistics ?? WriterStatistics() }

    // MARK: Reading

    /// Runs `body` on a consistent snapshot of the ledger.
    ///
    /// - Throws: `.rebuildRequired` while projections are incomplete, and what `body` throws.
    public func read<R>(_ body: (LedgerSnapshot) throws -> R) throws -> R {
        try environment.read { txn in
            let snapshot = LedgerSnapshot(txn: txn, schema: schema)
            if let through = try snapshot.rebuildingThrough() {
                throw StoreError(
                    .rebuildRequired,
                    "projections are being rebuilt (done through seq \(through)) or a rebuild was interrupted;"
                        + " run `ledger rebuild`")
            }
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
    /// - Throws: `.invalidArgument` when the destination already holds this project's ledger;
    ///   `.unavailable` when it cannot be written.
    public func backup(to destination: String) throws {
        let target = (destination as NSString).appendingPathComponent(project.rawValue)
        guard !FileManager.default.fileExists(atPath: target + "/data.mdb") else {
            throw StoreError(.invalidArgument, "\(target) already holds a ledger; choose an empty destination")
        }
        do {
            try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: true)
            try environment.copy(to: target)
        } catch {
            throw StoreError(.unavailable, "cannot write the backup to \(target): \(error)")
        }
    }

    /// Layout 1 → 2: fills `sends` from `messages` (no `acknowledged` event can predate layout 2).
    private static func upgradeLayout(_ txn: LMDBTransaction, _ schema: LedgerSchema) throws {
        let version = try txn.withValue(in: schema.meta, forKey: MetaKey.layoutVersion) { $0?.loadBigEndianUInt32() }
        guard version == 1 else { return }
        var sends: [(seq: UInt64, messageID: UInt64)] = []
        try txn.withCursor(schema.messages) { cursor in
            try cursor.forEach { entry in
                sends.append((entry.value.loadBigEndianUInt64(), entry.key.loadBigEndianUInt64()))
                return true
            }
        }
        for send in sends.sorted(by: { $0.seq < $1.seq }) {
            try txn.put(schema.sends, key: send.seq, value: send.messageID, flags: .append)
        }
        try txn.put(schema.meta, key: MetaKey.layoutVersion, value: LedgerSchema.layoutVersion)
    }

    private static func interruptedRebuild(_ environment: LMDBEnvironment, _ schema: LedgerSchema) throws -> UInt64? {
        try environment.read { try LedgerSnapshot(txn: $0, schema: schema).rebuildingThrough() }
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

/// The recorder, set once it exists (the writer is created first and hands sends to it).
private final class RecorderSlot: @unchecked Sendable {
    // @unchecked: written in `Ledger.init` before any send can commit, and cleared by `close()` after the
    // writer has stopped; read only by the writer thread.
    var recorder: AudienceRecorder?
}

/// Carries a write's result from the writer thread to the thread waiting on a semaphore.
private final class ResultBox: @unchecked Sendable {
    // @unchecked: written before the semaphore is signalled, read after it is waited on.
    var result: Result<WriteReceipt, any Error>?
}
