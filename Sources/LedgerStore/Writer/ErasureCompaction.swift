import Foundation
import LMDBKit
import LedgerCore
import Logging
import Synchronization

/// What follows an erasure's commit, on the thread that committed it: the erasure journaled
/// (``ErasureJournal``) and the file rewritten with its live pages only, so that no freed page keeps what was
/// erased (``LMDBEnvironment/compact()``). A compaction that fails is owed (``CompactionDebt``) and made before
/// the writer's next transaction, or after a follower's next applied block; meanwhile ``problem`` says so.
///
/// - Note: Thread-safe; its calls run on the ledger's writer thread, or on the replica's while it applies blocks.
final class ErasureCompaction: Sendable {
    private let environment: LMDBEnvironment
    /// The data file the writer mapped, adopted anew after each compaction replaces it.
    private let dataFile: DataFileWatch?
    private let debt: CompactionDebt
    private let logger: Logger
    /// Whether journal lines may be owed (an erasure committed since they were last written, or their writing
    /// failed), and why it failed.
    private let journal = Mutex<(owed: Bool, problem: String?)>((owed: true, problem: nil))

    init(environment: LMDBEnvironment, dataFile: DataFileWatch?, logger: Logger) {
        self.environment = environment
        self.dataFile = dataFile
        self.logger = logger
        debt = CompactionDebt(directory: environment.path)
    }

    /// While a compaction is owed after an erasure: why the last one failed (freed pages of the file may still
    /// hold what was erased).
    var problem: String? { debt.problem }

    /// After the writer committed the erasures of `receipt`: journals and compacts, and says what the request is
    /// told. When the compaction fails the erasure stands (it is durable) but the request is told the file still
    /// holds the old bytes, and the writer compacts again before its next transaction (``settleOwed()``).
    func afterErasure(_ receipt: WriteReceipt) -> Result<WriteReceipt, any Error> {
        journalOwed("an erasure is recorded in the log")
        return compact(
            answering: receipt, done: "erased devices' identifiers and compacted the ledger's file",
            metadata: ["ledger.erased": "\(receipt.outcomes.filter { $0.seq != nil }.count)"],
            failed: """
                an erasure is recorded, but the ledger's file could not be compacted: freed pages may still hold \
                what was erased until the next compaction
                """,
            refusal: "the erasure is recorded, but the ledger's file could not be compacted yet; it will be before the"
                + " next write")
    }

    /// After the writer committed a retention sweep (``LedgerOperation/forgetContents(before:limit:)``): compacts,
    /// so that no freed page keeps a forgotten content, and says what the request is told (as
    /// ``afterErasure(_:)``; a retention sweep is not journaled: a restored copy is swept again by its rule).
    /// A sweep that forgot nothing (its range held only contents already forgotten, or written before the ledger
    /// sealed them) freed no page that held one: it is not compacted.
    func afterRetention(_ receipt: WriteReceipt) -> Result<WriteReceipt, any Error> {
        if let seq = receipt.outcomes.compactMap(\.seq).first,
            let event = try? environment.read({ txn in
                try LedgerSnapshot(txn: txn, schema: LedgerSchema(txn)).event(at: seq)
            }), case .retention(let sweep) = event.body, sweep.forgottenContents == 0
        {
            return .success(receipt)
        }
        return compact(
            answering: receipt,
            done: "forgot the contents of sends past the project's contentRetention and compacted the ledger's file",
            failed: """
                contents are forgotten by retention, but the ledger's file could not be compacted: freed pages may \
                still hold them until the next compaction
                """,
            refusal: "the retention sweep is recorded, but the ledger's file could not be compacted yet; it will be"
                + " before the next write")
    }

    /// Compacts after a committed forgetting and says what its request is told: its receipt, once no freed page
    /// holds what was forgotten (`done` logged with the time taken); when the compaction fails, the forgetting
    /// stands (it is durable), `failed` is logged and the request is told `refusal` (``settleOwed()`` compacts again
    /// before the next transaction).
    private func compact(
        answering receipt: WriteReceipt, done: Logger.Message, metadata: Logger.Metadata = [:],
        failed: Logger.Message, refusal: String
    ) -> Result<WriteReceipt, any Error> {
        let start = ContinuousClock.now
        do {
            try compact()
            var metadata = metadata
            metadata["ledger.compaction.duration"] = "\(ContinuousClock.now - start)"
            logger.notice(done, metadata: metadata)
            return .success(receipt)
        } catch {
            logger.critical(failed, metadata: ["error": "\(error)"])
            return .failure(StoreError(.unavailable, refusal))
        }
    }

    /// After a replicated block with `retention` events was applied (a follower): compacts the file, as the leader
    /// did for its copy; a failed compaction is owed (``compactIfOwed()``).
    func afterReplicatedRetention() {
        do {
            try compact()
            logger.notice("applied a replicated retention sweep to this copy and compacted its file")
        } catch {
            logger.critical(
                """
                a replicated retention sweep is applied, but this copy's file could not be compacted: freed pages \
                may still hold forgotten contents until the next compaction, tried after the next block
                """,
                metadata: ["error": "\(error)"])
        }
    }

    /// After a replicated block with `erased` events at `seqs` was applied (a follower): journals them and
    /// compacts the file, as the leader did for its copy. A failed compaction is owed and tried again after the
    /// next block applied (``compactIfOwed()``).
    func afterReplicatedErasures(at seqs: [UInt64]) {
        journalOwed("a replicated erasure is applied")
        do {
            try compact()
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

    /// The writer, before its next transaction: makes the compaction owed, if one is; throws when it still fails.
    /// - Returns: whether it compacted (the file changed under the writer's cached facts).
    func settleOwed() throws -> Bool {
        journalIfOwed("an erasure is recorded in the log")
        guard debt.problem != nil else { return false }
        try compact()
        logger.notice("compacted the ledger's file after an earlier erasure")
        return true
    }

    /// A follower's retry, after an applied block, of a compaction owed.
    func compactIfOwed() {
        journalIfOwed("a replicated erasure is applied")
        guard debt.problem != nil, (try? compact()) != nil else { return }
        logger.notice("compacted this copy's file after an earlier erasure")
    }

    /// Rewrites the file with its live pages only and adopts the new file's identity; the debt is settled, or
    /// owed the error, which is rethrown.
    private func compact() throws {
        do {
            try debt.begin()
            try environment.compact()
            dataFile?.adopt()
            debt.settle()
        } catch {
            debt.owe(because: error)
            throw error
        }
    }

    /// Writes the journal lines owed (``ErasureJournal/owedKey``): every `erased` event from the seq the meta key
    /// names that the journal does not hold, after dropping a torn last line; then clears the debt. A failure is
    /// logged (`what` says what stands without it) and kept in ``journalProblem`` for `/readyz`; the erasure stands
    /// (the log holds it), and the lines are tried again before the next transaction and at the next open.
    func journalOwed(_ what: String) {
        do {
            let owed = try environment.read { txn -> (from: UInt64, entries: [ErasureJournal.Entry])? in
                let schema = try LedgerSchema(txn)
                guard let from = try ErasureJournal.owedFrom(txn: txn, schema: schema) else { return nil }
                let snapshot = LedgerSnapshot(txn: txn, schema: schema)
                var seqs: [UInt64] = []
                try snapshot.forEachEvent(from: from) { event, _ in
                    if case .erased = event.body { seqs.append(event.seq) }
                    return true
                }
                return (from, try Self.journalEntries(of: seqs, in: snapshot))
            }
            if let owed {
                let held = Set(try ErasureJournal.read(directory: environment.path))
                try ErasureJournal.append(owed.entries.filter { !held.contains($0) }, directory: environment.path)
                try environment.write { txn in try ErasureJournal.settle(from: owed.from, txn: txn, schema: LedgerSchema(txn)) }
            }
            journal.withLock { $0 = (owed: false, problem: nil) }
        } catch {
            journal.withLock { $0 = (owed: true, problem: "\(error)") }
            logger.critical(
                "\(what) but not yet in erasures.jsonl: a restore of an older backup would not apply it again until it is; tried again before the next write",
                metadata: ["error": "\(error)"])
        }
    }

    /// ``journalOwed(_:)`` when an earlier try failed (the writer before each transaction, a follower after each block).
    private func journalIfOwed(_ what: String) {
        if journal.withLock({ $0.owed }) { journalOwed(what) }
    }

    /// At a writer's open: the journal lines owed by an earlier process. A torn last line that no debt accounts for
    /// (a copy restored beside a journal a crash tore) cannot be told apart from a lost erasure: the open fails.
    ///
    /// - Throws: `.corrupt` naming the journal.
    func journalAtOpen() throws {
        let owed = try environment.read { txn in try ErasureJournal.owedFrom(txn: txn, schema: LedgerSchema(txn)) }
        if owed == nil, ErasureJournal.isTorn(directory: environment.path) {
            throw StoreError(
                .corrupt,
                "\(environment.path)/\(ErasureJournal.fileName) ends in a line torn by a crash that this copy of the"
                    + " ledger does not account for (a copy restored beside it?): compare it with `ledger audit"
                    + " erasures` of the newest copy, then complete or remove the torn line (docs/operations.md,"
                    + " \"Erasures and restores\")")
        }
        journalOwed("an erasure is recorded in the log")
    }

    /// While journal lines are owed and could not be written: why (a restore of an older backup would not apply
    /// those erasures again).
    var journalProblem: String? { journal.withLock { $0.problem } }

    /// The journal lines of the `erased` events at `seqs`.
    static func journalEntries(of seqs: [UInt64], in snapshot: LedgerSnapshot) throws
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
}
