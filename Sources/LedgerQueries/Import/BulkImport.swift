import LedgerStore
import Foundation
import Synchronization
import LMDBKit
import LedgerCore
import Logging

/// Appends requests to an empty ledger the way `rebuild` folds: operations are decided against the
/// projections held in memory (``BulkProjection``), each request's events go to the log alone in one
/// durable transaction — encoded, chained and committed on a thread of their own (``BulkLogWriter``) while
/// the next requests are decided — and the projections and the Merkle tree are written once, in key order,
/// by ``finish()``.
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
public final class BulkImport: Sendable {
    private let environment: LMDBEnvironment
    private let schema: LedgerSchema
    private let clock: @Sendable () -> LedgerTime
    private let logger: Logger
    /// The appender, and whether more may be appended (false once finished, discarded or failed).
    private let state: Mutex<(appender: LogAppender<BulkProjection, DecidedEvents>, isOpen: Bool)>
    private let tree = MerkleTreeWorker()
    private let log: BulkLogWriter

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
        state = Mutex(
            (
                LogAppender(
                    projection: BulkProjection(), sink: DecidedEvents(), head: .empty, limits: ledger.options.limits,
                    messageIDs: SystemRandomNumberGenerator()),
                true
            ))
        log = BulkLogWriter(environment: environment, schema: schema, tree: tree)
    }

    deinit {
        // Nothing may still write to the log once the import is dropped (and the ledger perhaps closed).
        log.drain()
    }

    /// Decides one request and queues its events for the log: they are committed, in one transaction per
    /// request and in order, on the log writer's thread while the next requests are decided (at most two
    /// requests wait), and are all durable when ``finish()`` or ``waitForLog()`` returns.
    ///
    /// - Throws: the request's refusal (its time precedes the last event's; nothing changed, and the import
    ///   may go on); `.invalidArgument` for a request with a send; `.unavailable` when the log could not be
    ///   written (for this or an earlier request), after which only ``discard()`` is left.
    public func append(_ request: WriteRequest) throws -> WriteReceipt {
        try state.withLock { state in
            guard state.isOpen else { throw Self.closed }
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
                try log.rethrowFailure()
                result = try state.appender.apply(request, now: clock())
                if case .success = result {
                    try state.appender.finish()
                    log.write(state.appender.sink.take())
                }
            } catch {
                state.isOpen = false
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
        try state.withLock { state in
            guard state.isOpen else { throw Self.closed }
            state.isOpen = false
            try waitForLog(&state.isOpen)
            var projection = state.appender.projection
            projection.tree = tree
            try projection.write(to: environment, schema: schema)
            try environment.write { txn in _ = try txn.delete(schema.meta, key: MetaKey.rebuildingThrough) }
            return state.appender.head.seq
        }
    }

    /// Takes everything back: the log, the head and the projections are cleared in one transaction, and
    /// the ledger is empty again, as when the import began. For a file found malformed part-way through, or
    /// any failure: an import into an empty ledger happens whole or not at all.
    ///
    /// - Throws: an LMDB failure; the marker then stays (writers are refused until `ledger rebuild`).
    public func discard() throws {
        try state.withLock { state in
            state.isOpen = false
            log.drain()
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

    /// Waits until every request appended so far is durable in the log.
    ///
    /// - Throws: `.unavailable` when the log could not be written.
    public func waitForLog() throws {
        try state.withLock { state in try waitForLog(&state.isOpen) }
    }

    private func waitForLog(_ isOpen: inout Bool) throws {
        log.drain()
        do {
            try log.rethrowFailure()
        } catch {
            isOpen = false
            throw Ledger.storageError(error, directory: environment.path)
        }
    }

    private static let closed = StoreError(.invalidArgument, "the bulk import has finished or failed")
}

extension Ledger {
    /// Starts a ``BulkImport`` into this ledger, which must be empty and open for writing.
    public func beginBulkImport() throws -> BulkImport { try BulkImport(ledger: self) }
}

/// A request's events as the appender decided them, before they are encoded and chained (which the log
/// writer does, on its own thread).
struct DecidedEvents: EventSink {
    private(set) var events: [LedgerEvent] = []
    private(set) var head: LedgerHead?

    /// Keeps `event`; its hash is the log writer's to compute, so `previousHash` is left as it is.
    mutating func store(_ event: LedgerEvent, chainingFrom previousHash: inout [UInt8]) {
        events.append(event)
    }

    mutating func store(head: LedgerHead) { self.head = head }

    /// The events and the head stored since the last call, handed over.
    mutating func take() -> (events: [LedgerEvent], head: LedgerHead?) {
        defer {
            events = []
            head = nil
        }
        return (events, head)
    }
}

/// The second stage of a bulk import, on a ``SerialWorker`` of its own: encodes and chains each request's
/// events in order, commits them and the head in one durable log-only transaction (retried whole if the
/// map must grow), and hands their hashes to the tree's thread. The first failure stops it: the requests
/// after it are not written.
///
/// Why apart: encoding, SHA-256 and the commit were nearly half of the thread that decides and folds,
/// which had become the import's longest.
private final class BulkLogWriter: Sendable {
    typealias Decided = (events: [LedgerEvent], head: LedgerHead?)

    /// What the writer keeps between requests.
    private struct LogState {
        /// The chain hash of the last event written.
        var hash = HashChain.genesis
        var records = PendingLog()
    }

    /// One request queued beside the one being written: bounds the memory of events waiting.
    private let worker: SerialWorker<Decided, LogState>

    init(environment: LMDBEnvironment, schema: LedgerSchema, tree: MerkleTreeWorker) {
        worker = SerialWorker(name: "ledger-bulk-log", state: LogState(), capacity: 1) { state, requests in
            for decided in requests {
                try Self.commit(decided, state: &state, environment: environment, schema: schema, tree: tree)
            }
        }
    }

    /// Queues a request's events and head; waits while one is queued.
    func write(_ decided: Decided) { worker.enqueue(decided) }

    /// Waits for the queued requests to be written (or to fail).
    func drain() { worker.waitUntilIdle() }

    /// The first failure to write, if any.
    func rethrowFailure() throws { try worker.rethrowFailure() }

    private static func commit(
        _ decided: Decided, state: inout LogState, environment: LMDBEnvironment, schema: LedgerSchema,
        tree: MerkleTreeWorker
    ) throws {
        for event in decided.events { state.records.store(event, chainingFrom: &state.hash) }
        try environment.write { txn in
            try state.records.forEachRecord { seq, record in
                try txn.put(schema.log, key: seq, value: record, flags: .append)
            }
            if var head = decided.head {
                head.hash = state.hash
                try txn.put(schema.meta, key: MetaKey.head, value: head.encoded)
            }
        }
        guard tree.add(state.records.hashes) else {
            throw StoreError(.unavailable, "the Merkle tree's thread stopped")
        }
        state.records.removeAll()
    }
}

/// A request's records, one after another in one buffer (no array per event), and their chain hashes for
/// the tree.
struct PendingLog {
    private var bytes: [UInt8] = []
    /// Each record's seq and where it ends in `bytes` (it starts where the one before ends).
    private var ends: [(seq: UInt64, end: Int)] = []
    private(set) var hashes: [ChainHash] = []

    /// Encodes and chains `event` after `previousHash` (which becomes its hash), and keeps its record.
    mutating func store(_ event: LedgerEvent, chainingFrom previousHash: inout [UInt8]) {
        let start = bytes.count
        HashChain.appendRecord(of: event, chainingFrom: &previousHash, to: &bytes)
        ends.append((event.seq, bytes.count))
        hashes.append(bytes.withUnsafeBytes { ChainHash(UnsafeRawBufferPointer(rebasing: $0[start...])) })
    }

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
    }
}
