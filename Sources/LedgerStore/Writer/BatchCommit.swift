import LMDBKit
import LedgerCore
import Logging

/// Runs one group-commit batch in one LMDB write transaction: every request's events, projection changes and
/// the head commit together, or nothing does. The writer's only way to commit (``LedgerWriter``).
///
/// Refusals and rejections are values (see ``LogAppender/apply(_:now:)``); anything thrown aborts the whole
/// transaction — and LMDBKit never commits a transaction in which an LMDB call failed, even if the error was
/// caught. A full map is grown and the batch run again (``LMDBEnvironment/write(_:)``). How one failing request
/// is kept from failing the others is the ``Ledger/RequestIsolation``. `facts` learn from every transaction and
/// are told which committed (``WriterInstanceCache``).
///
/// With a cluster's `gate`, each transaction passes it last, before LMDB commits; ahead of the cluster the gate
/// only admits the block, and each block committed is given to `ahead` with the indices of its requests at
/// once — before the next transaction, so that each block the gate admits follows the last one handed over
/// (``ReplicationGate/commitsAhead``).
struct BatchCommit {
    let environment: LMDBEnvironment
    let schema: LedgerSchema
    let limits: LedgerLimits
    let moves: RecentMemberships.MoveCursor
    let facts: WriterInstanceCache
    let chainWorker: SerialWorker<BlockingJob, Void>
    var isolation: Ledger.RequestIsolation = .retryAlone
    var gate: (any ReplicationGate)? = nil
    /// Sends to a device or to a topic of at most this many recipients get their `audience` event in their own
    /// transaction (``appendSmallAudiences(of:txn:now:)``); 0: never.
    var inlineAudienceLimit = 0
    let logger: Logger

    /// Commits `batch`, stamped `now` where a request names no time.
    func run(
        _ batch: [WriteRequest], now: LedgerTime, ahead: ((ReplicatedBlock, [Int]) -> Void)? = nil
    ) -> CommittedBatch {
        do {
            let (results, block) = try transaction(batch, now: now, ahead: ahead != nil)
            if let block { ahead?(block, Array(batch.indices)) }
            return CommittedBatch(results: results)
        } catch let refusal as ReplicationRefusal {
            // Retrying alone would be refused the same way, once per request. (The facts learnt in the aborted
            // transaction are forgotten when the next one begins: ``WriterInstanceCache/begin(transaction:)``.)
            return CommittedBatch(failing: batch.count, with: Ledger.refused(refusal))
        } catch {
            guard isolation == .retryAlone, batch.count > 1 else {
                logger.error(
                    "ledger write failed; nothing was written",
                    metadata: [
                        "ledger.request": "\(batch.count == 1 ? batch[0].requestID : "\(batch.count) requests")",
                        "error": "\(error)",
                    ])
                var committed = CommittedBatch(failing: batch.count, with: failure(error))
                committed.noteFailure(error)
                return committed
            }
            logger.warning(
                "ledger batch failed; retrying its requests one by one",
                metadata: ["ledger.batch.requests": "\(batch.count)", "error": "\(error)"])
            var committed = CommittedBatch(results: [])
            for (index, request) in batch.enumerated() {
                do {
                    let (results, block) = try transaction([request], now: now, ahead: ahead != nil)
                    committed.results.append(results[0])
                    if let block { ahead?(block, [index]) }
                } catch let refusal as ReplicationRefusal {
                    committed.results.append(.failure(Ledger.refused(refusal)))
                } catch {
                    logger.error(
                        "ledger write failed; nothing was written",
                        metadata: ["ledger.request": "\(request.requestID)", "error": "\(error)"])
                    committed.noteFailure(error)
                    committed.results.append(.failure(failure(error)))
                }
            }
            return committed
        }
    }

    /// One write transaction for `requests`: with ``Ledger/RequestIsolation/retryAlone`` all in it at once, with
    /// ``Ledger/RequestIsolation/nestedPerRequest`` each in a child of its own, a failed child discarded alone
    /// (and with it `facts`, which may hold what it learnt; a full map still aborts the whole batch, which is grown
    /// and run again). Then the small audiences, then the gate.
    private func transaction(_ requests: [WriteRequest], now: LedgerTime, ahead: Bool) throws -> (
        [Result<WriteReceipt, any Error>], ReplicatedBlock?
    ) {
        let (results, transaction, block) = try environment.write { txn in
            facts.begin(transaction: txn.id)
            var start: LedgerHead?
            var results: [Result<WriteReceipt, any Error>] = []
            results.reserveCapacity(requests.count)
            var records: [[UInt8]] = []
            switch isolation {
            case .retryAlone:
                let appended = try append(requests, txn: txn, now: now, start: &start)
                results = appended.results
                records = appended.records
            case .nestedPerRequest:
                for request in requests {
                    do {
                        let appended = try txn.nested { child in
                            try append([request], txn: child, now: now, start: &start)
                        }
                        results.append(appended.results[0])
                        records += appended.records
                    } catch LMDBError.Code.mapFull {
                        throw LMDBError(code: .mapFull, function: "mdb_put")
                    } catch {
                        facts.forget()
                        logger.error(
                            "ledger write failed; nothing was written",
                            metadata: ["ledger.request": "\(request.requestID)", "error": "\(error)"])
                        results.append(.failure(failure(error)))
                    }
                }
            }
            if let audiences = try appendSmallAudiences(of: &results, txn: txn, now: now) {
                records += audiences
            }
            var block: ReplicatedBlock?
            if let gate, let start {
                block = try Self.pass(gate, ahead: ahead, start: start, records: records, txn: txn, schema: schema)
            }
            return (results, txn.id, block)
        }
        facts.committed(transaction: transaction)
        return (results, block)
    }

    /// Applies `requests` in `txn` with a log appender of its own, then moves recent memberships if they are due
    /// while the chainer (if any) chains the last events — the writer would otherwise wait for it — and stores the
    /// log's records, the tree's subtrees and the head. `start` is set to the head before, if it is not yet.
    /// - Returns: each request's result, and the records appended (for the cluster; empty without a gate).
    func append(
        _ requests: [WriteRequest], txn: LMDBTransaction, now: LedgerTime, start: inout LedgerHead?
    ) throws -> (results: [Result<WriteReceipt, any Error>], records: [[UInt8]]) {
        var appender = try LogAppender(
            txn: txn, schema: schema, limits: limits, facts: facts, chainWorker: chainWorker,
            messageIDs: SystemRandomNumberGenerator())
        if start == nil { start = appender.head }
        if gate != nil { appender.sink.replicatedRecords = [] }
        var results: [Result<WriteReceipt, any Error>] = []
        results.reserveCapacity(requests.count)
        for request in requests {
            let result = try appender.apply(request, now: now)
            // An erasure's journal line is written once this commits; until then it is owed (``ErasureJournal``).
            if request.erases, case .success(let receipt) = result, let first = receipt.outcomes.compactMap(\.seq).min() {
                try ErasureJournal.markOwed(from: first, txn: txn, schema: schema)
            }
            results.append(result.mapError { $0 })
        }
        appender.sink.submitPending()
        try RecentMemberships.moveIfFull(
            txn: txn, schema: schema, limit: limits.recentMembershipsBeforeMove, cursor: moves,
            moved: { facts.recentMoved($0) })
        try appender.finish()
        return (results, appender.sink.replicatedRecords ?? [])
    }

    /// Hands what a transaction appended since `start` to `gate` (or, when it appended nothing, has it confirm the
    /// leadership): the last step before LMDB commits. Ahead of the cluster, the gate only admits the block, the
    /// transaction notes what the cluster held then (``MetaKey/clusterHeld``), and the block is returned, to be
    /// handed over once LMDB committed it.
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

    /// What a request is told when its write failed (``Ledger/storageError(_:directory:)``).
    private func failure(_ error: any Error) -> StoreError {
        Ledger.storageError(error, directory: environment.path)
    }
}

extension Ledger {
    /// What the requests of a batch the cluster refused are told: unavailable, nothing written.
    static func refused(_ refusal: ReplicationRefusal) -> StoreError {
        StoreError(.unavailable, "the cluster did not accept the write; nothing was written: \(refusal.message)")
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
}
