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
            schema = try environment.read { try LedgerSchema($0) }
        } else {
            schema = try environment.write { txn in
                let schema = try LedgerSchema(txn)
                if try !txn.contains(schema.meta, key: MetaKey.layoutVersion) {
                    try txn.put(schema.meta, key: MetaKey.layoutVersion, value: LedgerSchema.layoutVersion)
                    try txn.put(schema.meta, key: MetaKey.project, value: project.rawValue)
                }
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
        if readOnly {
            self.committer = nil
        } else {
            if !options.forRebuild, let through = try Self.interruptedRebuild(environment, schema) {
                throw StoreError(
                    .rebuildRequired,
                    "a rebuild of \(directory) stopped after seq \(through); run `ledger rebuild` before writing")
            }
            let limits = options.limits
            let clock = options.clock
            self.committer = GroupCommitter(
                maximumBatchOperations: options.maximumBatchOperations, observer: options.commitObserver
            ) {
                [environment, schema, logger] batch in
                Self.commit(
                    batch, environment: environment, schema: schema, limits: limits, now: clock(), logger: logger)
            }
        }
    }

    deinit { committer?.stop() }

    /// Finishes queued writes and stops the writer. Further appends fail with `.unavailable`.
    public func close() { committer?.stop() }

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
