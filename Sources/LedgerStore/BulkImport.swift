import Foundation
import LMDBKit
import LedgerCore
import Logging

/// Appends requests to an empty ledger the way `rebuild` folds: operations are decided against the
/// projections held in memory (``BulkProjection``), each request's events go to the log alone in one
/// durable transaction, and the projections and the Merkle tree are written once, in key order, by
/// ``finish()``.
///
/// What `ledger import` uses on migration day. The live writer does five to eight B-tree puts per
/// subscription (the log record, both directions of membership, the topic's count, the tree's nodes) into
/// trees that grow at random places; here each event is one put at the end of the log, and the projections
/// are written as `rebuild` writes them. The decisions are the live writer's: the same ``LogAppender``, over
/// another projection — a property test compares the two byte for byte.
///
/// While it runs, the ledger carries the `rebuildingThrough` marker, as during `rebuild`: readers get
/// `rebuildRequired`, and a writer refuses to open it. A failure is undone by ``discard()``, which empties the
/// ledger again. If the process dies before ``finish()``, the log keeps every request it committed, and
/// `ledger rebuild` folds them (or the ledger is deleted and the import run again).
///
/// Sends are not taken: their audiences are computed from the stored projections, which a bulk import writes
/// only at the end. Memory grows with the ledger (every token, membership and interval), as for `rebuild`.
///
/// One caller at a time; nothing else may append to the ledger while it is open.
public final class BulkImport: @unchecked Sendable {
    // @unchecked: every field is touched only with `lock` held.
    private let environment: LMDBEnvironment
    private let schema: LedgerSchema
    private let clock: @Sendable () -> LedgerTime
    private let logger: Logger
    private let lock = NSLock()
    private var appender: LogAppender<BulkProjection, PendingLog>
    private let tree = TreeBuilderThread()
    /// False once finished, discarded or failed: nothing more may be appended.
    private var isOpen = true

    /// Starts a bulk import into `ledger`, which must hold no events.
    ///
    /// - Throws: `.invalidArgument` when the ledger is not open for writing or holds events;
    ///   `.rebuildRequired` when its projections are incomplete already; `.unavailable` (I/O).
    init(ledger: Ledger) throws {
        guard ledger.options.mode == .readWrite else {
            throw StoreError(.invalidArgument, "a bulk import needs the ledger open for writing (exclusive access)")
        }
        environment = ledger.environment
        schema = ledger.schema
        clock = ledger.options.clock
        logger = ledger.logger
        let schema = self.schema
        try environment.write { txn in
            let snapshot = LedgerSnapshot(txn: txn, schema: schema)
            try snapshot.requireCompleteProjections()
            let head = try snapshot.head()
            guard head.seq == 0 else {
                throw StoreError(
                    .invalidArgument, "a bulk import needs an empty ledger; this one holds \(head.seq) events")
            }
            for database in schema.projections { try txn.clear(database) }
            try txn.put(schema.meta, key: MetaKey.rebuildingThrough, value: UInt64(0))
        }
        appender = LogAppender(
            projection: BulkProjection(), sink: PendingLog(), head: .empty, limits: ledger.options.limits,
            messageIDs: SystemRandomNumberGenerator())
    }

    /// Decides and appends one request: its events are durable in the log when this returns.
    ///
    /// - Throws: the request's refusal (its time precedes the last event's; nothing changed, and the import
    ///   may go on); `.invalidArgument` for a request with a send; `.unavailable` when the log could not be
    ///   written, after which only ``discard()`` is left.
    public func append(_ request: WriteRequest) throws -> WriteReceipt {
        try lock.withLock {
            guard isOpen else { throw Self.closed }
            for operation in request.operations {
                switch operation {
                case .send, .recordAudience:
                    throw StoreError(
                        .invalidArgument, "a bulk import takes no sends; import them into a ledger with events")
                default: continue
                }
            }
            let result: Result<WriteReceipt, StoreError>
            do {
                result = try appender.apply(request, now: clock())
                if case .success = result { try commit() }
            } catch {
                isOpen = false
                logger.error(
                    "bulk import failed; the log keeps the requests before this one",
                    metadata: ["ledger.request": "\(request.requestID)", "error": "\(error)"])
                throw Ledger.storageError(error, directory: environment.path)
            }
            return try result.get()
        }
    }

    /// Writes the projections and the Merkle tree, and lifts the marker; returns the number of events.
    ///
    /// - Throws: an LMDB failure; the marker then stays, and `ledger rebuild` writes the projections.
    @discardableResult
    public func finish() throws -> UInt64 {
        try lock.withLock {
            guard isOpen else { throw Self.closed }
            isOpen = false
            var projection = appender.projection
            projection.tree = tree
            try projection.write(to: environment, schema: schema)
            try environment.write { txn in _ = try txn.delete(schema.meta, key: MetaKey.rebuildingThrough) }
            return appender.head.seq
        }
    }

    /// Takes everything back: the log, the head and the projections are cleared in one transaction, and
    /// the ledger is empty again, as when the import began. For a file found malformed part-way through, or
    /// any failure: an import into an empty ledger happens whole or not at all.
    ///
    /// - Throws: an LMDB failure; the marker then stays (writers are refused until `ledger rebuild`).
    public func discard() throws {
        try lock.withLock {
            isOpen = false
            tree.cancel()
            let schema = self.schema
            try environment.write { txn in
                try txn.clear(schema.log)
                for database in schema.projections { try txn.clear(database) }
                _ = try txn.delete(schema.meta, key: MetaKey.head)
                _ = try txn.delete(schema.meta, key: MetaKey.rebuildingThrough)
            }
        }
    }

    /// One durable transaction with the request's log records and the new head; the chain hashes then go to
    /// the tree's thread. Retried whole if the map must grow.
    private func commit() throws {
        let schema = self.schema
        try appender.finish()
        try environment.write { txn in
            try appender.sink.forEachRecord { seq, record in
                try txn.put(schema.log, key: seq, value: record, flags: .append)
            }
            if let head = appender.sink.head {
                try txn.put(schema.meta, key: MetaKey.head, value: head.encoded)
            }
        }
        guard tree.add(appender.sink.hashes) else {
            throw StoreError(.unavailable, "the Merkle tree's thread stopped")
        }
        appender.sink.removeAll()
    }

    private static let closed = StoreError(.invalidArgument, "the bulk import has finished or failed")
}

extension Ledger {
    /// Starts a ``BulkImport`` into this ledger, which must be empty and open for writing.
    public func beginBulkImport() throws -> BulkImport { try BulkImport(ledger: self) }
}

/// A request's events, held until ``BulkImport`` commits them: the records one after another in one
/// buffer (no array per event), and their chain hashes for the tree.
struct PendingLog: EventSink {
    private var bytes: [UInt8] = []
    /// Each record's seq and where it ends in `bytes` (it starts where the one before ends).
    private var ends: [(seq: UInt64, end: Int)] = []
    private(set) var hashes: [ChainHash] = []
    private(set) var head: LedgerHead?

    mutating func store(record: [UInt8], seq: UInt64) {
        bytes.append(contentsOf: record)
        ends.append((seq, bytes.count))
        hashes.append(record.withUnsafeBytes { ChainHash($0) })
    }

    mutating func store(head: LedgerHead) { self.head = head }

    /// Calls `body` with each record and its seq, in the order stored.
    func forEachRecord(_ body: (UInt64, UnsafeRawBufferPointer) throws -> Void) rethrows {
        try bytes.withUnsafeBytes { bytes in
            var start = 0
            for (seq, end) in ends {
                try body(seq, UnsafeRawBufferPointer(rebasing: bytes[start..<end]))
                start = end
            }
        }
    }

    /// Empties the log for the next request; the hashes' array is handed to the tree, so a new one is made.
    mutating func removeAll() {
        bytes.removeAll(keepingCapacity: true)
        ends.removeAll(keepingCapacity: true)
        hashes = []
        head = nil
    }
}
