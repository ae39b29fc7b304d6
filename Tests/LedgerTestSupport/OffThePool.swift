import Foundation
import LedgerStore
import Synchronization
import Testing

/// Runs a suite's tests on threads of their own (``TestWorkExecutor``), never on Swift's cooperative pool.
///
/// The pool has as many threads as cores — two here. The store, CLI and property suites do seconds of
/// synchronous work between their awaits (LMDB opens and fsyncs, verify, rebuild, brute-force checks): run
/// on the pool, a few of them held both threads for a minute at a time, and every task that had to answer
/// meanwhile waited — a ReplicaGate test's stand-in for etcd among them, whose writer gave up after 10 s
/// (three `make test` runs out of three on a fresh clone, 2026-11-28). Under this trait they share the
/// executor's threads among themselves and leave the pool to the tasks that only await.
///
/// Apply to a suite (`@Suite("…", .offThePool)`): its tests, and every task they start, prefer the executor.
public struct OffThePool: SuiteTrait, TestTrait, TestScoping {
    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        try await withTaskExecutorPreference(TestWorkExecutor.shared) { try await function() }
    }
}

extension Trait where Self == OffThePool {
    /// See ``OffThePool``.
    public static var offThePool: OffThePool { OffThePool() }
}

/// A task executor of a few threads of its own (``SerialWorker``s, one a thread), for the tests that do
/// synchronous work (``OffThePool``): as many threads as cores, so that they compete among themselves as
/// they did on the pool.
///
/// - Note: Thread-safe.
public final class TestWorkExecutor: TaskExecutor {
    public static let shared = TestWorkExecutor(threads: max(2, ProcessInfo.processInfo.activeProcessorCount))

    private let workers: [SerialWorker<BlockingJob, Void>]
    private let next = Atomic<Int>(0)

    init(threads: Int) {
        workers = (0..<threads).map { SerialWorker(name: "test-work-\($0)") }
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        let worker = workers[next.wrappingAdd(1, ordering: .relaxed).oldValue % workers.count]
        // The workers are never stopped (the executor lives as long as the test process).
        _ = worker.enqueue { job.runSynchronously(on: executor) }
    }
}
