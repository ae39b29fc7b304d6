import Foundation

/// The single writer of a ledger: a ``SerialWorker`` that takes every request queued while the previous
/// transaction was committing and commits them together (group commit).
///
/// Requests wait in `submit` until their batch is durable, so an answer always means "committed". A batch is
/// answered when its commit calls `respond` — at once on a ledger of its own, later on a cluster's leader that
/// commits ahead of etcd (``ReplicationGate/commitsAhead``), where the writer goes on to the next batch meanwhile.
///
/// - Note: Thread-safe. `submit` may be called from any task; the commit work runs only on the writer's
///   thread, so LMDB write transactions never cross an `await` or a thread.
final class GroupCommitter: Sendable {
    /// One result per request of a batch, in order.
    typealias Results = [Result<WriteReceipt, any Error>]
    /// Runs one batch in one transaction with the writer's state, and calls `respond` once with the results
    /// (from any thread, and perhaps after it returned).
    typealias Commit =
        @Sendable (inout WriterState, [WriteRequest], _ respond: @escaping @Sendable (Results) -> Void)
        -> Void

    private struct Pending: Sendable {
        let request: WriteRequest
        let complete: @Sendable (Result<WriteReceipt, any Error>) -> Void
    }

    /// Where a batch's answer is while its commit runs.
    private enum Answer {
        /// The commit has not returned; the results, if it already gave them.
        case committing(Results?)
        /// The commit returned: results are answered as they come.
        case committed
    }

    private let worker: SerialWorker<Pending, WriterState>
    private let statistics: LockedValue<WriterStatistics>

    /// - Parameters:
    ///   - maximumBatchOperations: a batch closes once it holds this many operations (bounds latency and
    ///     transaction size); a single larger request still commits alone.
    ///   - observer: told each batch's requests, operations and commit time, on the writer's thread.
    ///   - state: what the writer keeps between transactions.
    ///   - commit: runs one batch in one transaction.
    init(
        maximumBatchOperations: Int, observer: (@Sendable (Int, Int, Duration) -> Void)? = nil,
        state: sending WriterState, commit: @escaping Commit
    ) {
        let statistics = LockedValue(WriterStatistics())
        self.statistics = statistics
        worker = SerialWorker(
            name: "ledger-writer", state: state,
            batch: { queued in
                // A request that erases rewrites committed records and is followed by a compaction: it
                // commits alone (``LedgerOperation/erase(_:reason:)``).
                if queued.first?.request.rewritesLog == true { return 1 }
                var operations = 0
                var taken = 0
                while taken < queued.count
                    && (taken == 0
                        || (operations + queued[taken].request.operations.count <= maximumBatchOperations
                            && !queued[taken].request.rewritesLog))
                {
                    operations += queued[taken].request.operations.count
                    taken += 1
                }
                return taken
            },
            work: { state, batch in
                let start = ContinuousClock.now
                // Results given before `commit` returns are answered after the observer is told (metrics count a
                // commit before its requests hear of it); later ones at once.
                let answer = LockedValue(Answer.committing(nil))
                let complete: @Sendable (Results) -> Void = { results in
                    for (pending, result) in zip(batch, results) { pending.complete(result) }
                }
                commit(&state, batch.map(\.request)) { results in
                    let now = answer.withLock { answer -> Bool in
                        guard case .committing = answer else { return true }
                        answer = .committing(results)
                        return false
                    }
                    if now { complete(results) }
                }
                let elapsed = ContinuousClock.now - start
                let operations = batch.reduce(0) { $0 + $1.request.operations.count }
                statistics.withLock {
                    $0.record(requests: batch.count, operations: operations, duration: elapsed)
                }
                observer?(batch.count, operations, elapsed)
                let early = answer.withLock { answer -> Results? in
                    defer { answer = .committed }
                    if case .committing(let results) = answer { return results }
                    return nil
                }
                if let early { complete(early) }
            })
    }

    /// Queues `request` and returns once it is durable (or failed).
    func submit(_ request: WriteRequest) async throws -> WriteReceipt {
        try await worker.run(ifStopped: Self.closed) { continuation in
            Pending(request: request) { continuation.resume(with: $0) }
        }
    }

    /// Queues `request` and blocks the calling thread (a worker's, never a task's) until it is durable (or failed).
    func submitAndWait(_ request: WriteRequest) -> Result<WriteReceipt, any Error> {
        worker.runBlocking(ifStopped: Self.closed) { complete in Pending(request: request, complete: complete) }
    }

    /// Commits what is queued, then stops the writer's thread. Later submissions fail.
    func stop() { worker.stop() }

    /// Counters since the ledger was opened.
    var currentStatistics: WriterStatistics { statistics.withLock { $0 } }

    private static let closed = StoreError(.unavailable, "the ledger is closed")
}
