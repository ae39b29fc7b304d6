import LMDBKit
import LedgerCore
import Logging

/// A ledger's single writer: group commit on a thread of its own (``GroupCommitter``), each batch committed by
/// ``BatchCommit``, and every commit released through one path (``CommitRelease``) before its requests are
/// answered.
///
/// A batch, in order:
/// 1. refused whole when the data file was replaced under the writer (``DataFileWatch``), or when a compaction
///    owed after an erasure still fails (``ErasureCompaction/settleOwed()``);
/// 2. committed in one transaction (``BatchCommit/run(_:now:ahead:)``), passing the cluster's gate, if any;
/// 3. an erasure (which commits alone) journaled and the file compacted (``ErasureCompaction/afterErasure(_:)``);
/// 4. released — at once, or on a leader that commits ahead of etcd once etcd holds its blocks
///    (``AheadAcknowledgement``): the observers are told what was committed, in their order;
/// 5. answered.
///
/// No batch, whatever kind, is answered by another path: what a request is told was committed has been released.
///
/// - Note: Thread-safe. `submit` may be called from any task; the commit work runs only on the writer's thread,
///   so LMDB write transactions never cross an `await` or a thread.
final class LedgerWriter: Sendable {
    private let committer: GroupCommitter

    /// - Parameters:
    ///   - release: the path every commit leaves by.
    ///   - compaction: what follows an erasure, and a compaction owed.
    ///   - dataFile: the data file mapped, checked before each transaction.
    init(
        storage: LedgerStorage, options: Ledger.Options, release: CommitRelease, compaction: ErasureCompaction,
        dataFile: DataFileWatch?, logger: Logger
    ) {
        let clock = options.clock
        let gate = options.replication
        let environment = storage.environment
        let schema = storage.schema
        let limits = options.limits
        let isolation = options.isolation
        let inlineAudienceLimit = options.recordsAudiences ? options.inlineAudienceLimit : 0
        committer = GroupCommitter(
            maximumBatchOperations: options.maximumBatchOperations,
            observer: { release.writerCommitted(requests: $0, operations: $1, duration: $2) }, state: WriterState()
        ) { state, batch, respond in
            if let problem = dataFile?.problem {
                if !state.stopReported {
                    state.stopReported = true
                    logger.critical("ledger writes stopped", metadata: ["error": "\(problem)"])
                }
                return respond(batch.map { _ in .failure(StoreError(.unavailable, problem)) })
            }
            do {
                if try compaction.settleOwed() { state.instances.forget() }
            } catch {
                let refusal = StoreError(
                    .unavailable, "the ledger's file must be compacted after an erasure first, and cannot be: \(error)")
                return respond(batch.map { _ in .failure(refusal) })
            }
            // The one way out: observers first, then the requests. `answers` differ from `results` only for an
            // erasure whose compaction failed (it is committed, and released, but the request is told so).
            let leave: @Sendable (GroupCommitter.Results, GroupCommitter.Results) -> Void = { results, answers in
                if let released = ReleasedCommit(batch: batch, results: results) { release.release(released) }
                respond(answers)
            }
            let erases = batch.count == 1 && batch[0].erases
            let rewrites = batch.count == 1 && batch[0].rewritesLog
            // What the requests were told is what happened: on a leader ahead of its cluster, only what the cluster
            // holds is released. An erasure is never committed ahead (it is followed by a compaction of the file).
            let acknowledgement = gate.flatMap { gate in
                gate.commitsAhead && !rewrites ? AheadAcknowledgement(gate: gate) { leave($0, $0) } : nil
            }
            let commit = BatchCommit(
                environment: environment, schema: schema, limits: limits, moves: state.moveCursor,
                facts: state.instances, chainWorker: state.chainWorker, isolation: isolation, gate: gate,
                inlineAudienceLimit: inlineAudienceLimit, logger: logger)
            let committed = commit.run(
                batch, now: clock(),
                ahead: acknowledgement.map { acknowledgement in
                    { block, requests in acknowledgement.handOver(block, requests: requests) }
                })
            guard let acknowledgement, let gate else {
                var answers = committed.results
                if rewrites, case .success(let receipt) = committed.results[0],
                    receipt.outcomes.contains(where: {
                        $0.seq != nil
                    })
                {
                    answers = [erases ? compaction.afterErasure(receipt) : compaction.afterRetention(receipt)]
                    // The file was rewritten: what the writer knew of its pages is gone.
                    state.instances.forget()
                }
                return leave(committed.results, answers)
            }
            acknowledgement.finish(committed.results)
            // After the blocks this batch did commit were handed over: they are written before the lead ends.
            if let failure = committed.storageFailure { gate.commitFailed(failure) }
        }
    }

    /// Queues `request` and returns once it is durable and released (or failed).
    func submit(_ request: WriteRequest) async throws -> WriteReceipt {
        try await committer.submit(request)
    }

    /// Queues `request` and blocks the calling thread (a worker's, never a task's) until it is durable and
    /// released (or failed).
    func submitAndWait(_ request: WriteRequest) -> Result<WriteReceipt, any Error> {
        committer.submitAndWait(request)
    }

    /// Commits what is queued, then stops the writer's thread. Later submissions fail.
    func stop() { committer.stop() }

    /// Group-commit counters since the writer started.
    var statistics: WriterStatistics { committer.currentStatistics }
}
