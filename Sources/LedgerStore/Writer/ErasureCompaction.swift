import Foundation
import LMDBKit
import LedgerCore
import Logging

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
        journal(receipt.outcomes.compactMap(\.seq), "an erasure is recorded in the log")
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
    func afterRetention(_ receipt: WriteReceipt) -> Result<WriteReceipt, any Error> {
        compact(
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
        journal(seqs, "a replicated erasure is applied")
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
        guard debt.problem != nil else { return false }
        try compact()
        logger.notice("compacted the ledger's file after an earlier erasure")
        return true
    }

    /// A follower's retry, after an applied block, of a compaction owed.
    func compactIfOwed() {
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

    /// Appends the `erased` events at `seqs` to the journal; a failure is logged (`what` says what stands without
    /// it), and the erasure stands: the log holds it.
    private func journal(_ seqs: [UInt64], _ what: String) {
        do {
            try ErasureJournal.append(
                try environment.read { txn in
                    try Self.journalEntries(of: seqs, in: LedgerSnapshot(txn: txn, schema: LedgerSchema(txn)))
                }, directory: environment.path)
        } catch {
            logger.critical(
                "\(what) but not in erasures.jsonl: a restore of an older backup would not apply it again",
                metadata: ["error": "\(error)"])
        }
    }

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
