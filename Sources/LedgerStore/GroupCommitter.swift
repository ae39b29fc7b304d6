import Foundation

/// The single writer of a ledger: a dedicated thread that takes every request queued while the previous
/// transaction was committing and commits them together (group commit).
///
/// Requests wait in `submit` until their batch is durable, so an answer always means "committed".
///
/// - Note: Thread-safe. `submit` may be called from any task; the commit work runs only on the writer thread,
///   so LMDB write transactions never cross an `await` or a thread.
final class GroupCommitter: @unchecked Sendable {
    // @unchecked: `queue` and `stopped` are only touched with `condition` locked.

    typealias Commit = ([WriteRequest]) -> [Result<WriteReceipt, any Error>]

    private struct Pending {
        let request: WriteRequest
        let complete: @Sendable (Result<WriteReceipt, any Error>) -> Void
    }

    private let condition = NSCondition()
    private var queue: [Pending] = []
    private var stopped = false
    private var statistics = WriterStatistics()
    private let finished = DispatchSemaphore(value: 0)
    private let maximumBatchOperations: Int
    private let commit: Commit
    private let observer: (@Sendable (Int, Int, Duration) -> Void)?

    /// - Parameters:
    ///   - maximumBatchOperations: a batch closes once it holds this many operations (bounds latency and
    ///     transaction size); a single larger request still commits alone.
    ///   - commit: runs one batch in one transaction, returning one result per request in order.
    init(
        maximumBatchOperations: Int, observer: (@Sendable (Int, Int, Duration) -> Void)? = nil,
        commit: @escaping Commit
    ) {
        self.maximumBatchOperations = maximumBatchOperations
        self.observer = observer
        self.commit = commit
        let thread = Thread { [self] in
            // Named from inside: on Linux, Foundation applies a name set before `start()` to no thread (profiles
            // showed the writer under its creator's name).
            Thread.current.name = "ledger-writer"
            run()
        }
        thread.start()
    }

    /// Queues `request` and returns once it is durable (or failed).
    func submit(_ request: WriteRequest) async throws -> WriteReceipt {
        try await withCheckedThrowingContinuation { continuation in
            enqueue(request) { continuation.resume(with: $0) }
        }
    }

    /// Queues `request`; `complete` runs on the writer thread once it is durable (or failed).
    func enqueue(_ request: WriteRequest, complete: @escaping @Sendable (Result<WriteReceipt, any Error>) -> Void) {
        condition.lock()
        if stopped {
            condition.unlock()
            complete(.failure(StoreError(.unavailable, "the ledger is closed")))
            return
        }
        queue.append(Pending(request: request, complete: complete))
        condition.signal()
        condition.unlock()
    }

    /// Commits what is queued, then stops the writer thread. Later submissions fail.
    func stop() {
        condition.lock()
        let wasStopped = stopped
        stopped = true
        condition.broadcast()
        condition.unlock()
        if !wasStopped { finished.wait() }
    }

    /// Counters since the ledger was opened.
    var currentStatistics: WriterStatistics {
        condition.lock()
        defer { condition.unlock() }
        return statistics
    }

    private func run() {
        while let batch = nextBatch() {
            let start = ContinuousClock.now
            let results = commit(batch.map(\.request))
            let elapsed = ContinuousClock.now - start
            let operations = batch.reduce(0) { $0 + $1.request.operations.count }
            condition.lock()
            statistics.record(requests: batch.count, operations: operations, duration: elapsed)
            condition.unlock()
            observer?(batch.count, operations, elapsed)
            for (pending, result) in zip(batch, results) {
                pending.complete(result)
            }
        }
        finished.signal()
    }

    /// Waits for work; takes the queued requests up to the batch limit. `nil` once stopped and drained.
    private func nextBatch() -> [Pending]? {
        condition.lock()
        defer { condition.unlock() }
        while queue.isEmpty && !stopped { condition.wait() }
        if queue.isEmpty { return nil }
        var operations = 0
        var taken = 0
        while taken < queue.count
            && (taken == 0 || operations + queue[taken].request.operations.count <= maximumBatchOperations)
        {
            operations += queue[taken].request.operations.count
            taken += 1
        }
        let batch = Array(queue[..<taken])
        queue.removeFirst(taken)
        return batch
    }
}

/// What the writer has done since the ledger was opened: group-commit batch sizes and commit latency.
public struct WriterStatistics: Sendable, Equatable {
    /// Write transactions committed (or failed).
    public private(set) var commits = 0
    public private(set) var requests = 0
    public private(set) var operations = 0
    /// Time spent in write transactions, including the durable commit.
    public private(set) var commitTime: Duration = .zero

    mutating func record(requests: Int, operations: Int, duration: Duration) {
        commits += 1
        self.requests += requests
        self.operations += operations
        commitTime += duration
    }
}
