import Foundation
import Synchronization

/// A thread of its own that runs the jobs queued on it, in order, a batch at a time, with a state only it
/// touches.
///
/// The one way this package runs blocking work — LMDB write transactions, `fsync`, hashing a log — beside
/// Swift's cooperative pool, whose few threads must never wait on a disk. Callers on threads queue jobs with
/// ``enqueue(_:)``; callers in tasks await theirs through ``run(ifStopped:_:)`` (or ``perform(_:)`` for a
/// worker of closures).
///
/// ```swift
/// let hasher = SerialWorker<[UInt8], Int>(name: "hasher", state: 0) { total, jobs in
///     for job in jobs { total += job.count }
/// }
/// hasher.enqueue([1, 2, 3])
/// let total = try hasher.finish()  // 3, once every queued job has run
/// ```
///
/// - A job that throws stops the worker: the jobs queued after it are dropped, later ones refused, and the
///   error is rethrown by ``rethrowFailure()`` and ``finish()``.
/// - With a `capacity`, ``enqueue(_:)`` waits for room (back-pressure for a producing thread).
/// - With `recyclesJobs`, each job the work is done with is kept for the producer to take back
///   (``takeReturned()``), so that a batch's buffer is reused, and its elements freed, on the producer's thread.
///
/// - Note: Thread-safe. `work` runs only on the worker's thread, one batch at a time; the state is the
///   worker's until ``finish()`` has waited for the thread to end.
public final class SerialWorker<Job: Sendable, State>: Sendable {
    private let core: Core

    /// Starts the worker's thread.
    ///
    /// - Parameters:
    ///   - name: the thread's name, as profilers show it: at most 15 bytes, Linux's limit (a longer one is not
    ///     applied, and the thread keeps its creator's).
    ///   - state: what the work keeps between batches; handed back by ``finish()``.
    ///   - capacity: at most this many jobs wait (not counting the batch in hand); ``enqueue(_:)`` waits for room.
    ///   - niceness: added to the thread's nice value (Linux keeps one per thread): a positive value lets the
    ///     others have the cores first.
    ///   - recyclesJobs: keep each finished job for ``takeReturned()``.
    ///   - batch: how many of the waiting jobs, from the first, the next batch takes (at least one is taken).
    ///     All of them by default.
    ///   - work: runs one batch with the state.
    public init(
        name: String, state: sending State, capacity: Int = .max, niceness: Int32 = 0, recyclesJobs: Bool = false,
        batch: @escaping @Sendable ([Job]) -> Int = { $0.count },
        work: @escaping @Sendable (inout State, [Job]) throws -> Void
    ) {
        core = Core(state: state, capacity: capacity, recycles: recyclesJobs, batch: batch, work: work)
        let core = self.core
        let thread = Thread {
            // Named from inside: on Linux, Foundation applies a name set before `start()` to no thread.
            Thread.current.name = name
            #if os(Linux)
                // `who` 0 is the calling thread. Failing changes only speed.
                if niceness != 0 { _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, niceness) }
            #endif
            core.run()
        }
        thread.start()
    }

    deinit { core.end(runQueued: false) }

    /// Queues `job` after the others; waits while `capacity` jobs wait.
    ///
    /// - Returns: `false`, and `job` is not run, once the worker has stopped, been cancelled or failed.
    @discardableResult
    public func enqueue(_ job: Job) -> Bool { core.enqueue(CollectionOfOne(job)) }

    /// Queues `jobs` after the others, in order (all at once: `capacity` is not waited for).
    @discardableResult
    public func enqueue(contentsOf jobs: [Job]) -> Bool { jobs.isEmpty || core.enqueue(jobs) }

    /// Jobs queued and not finished: waiting, or in the batch in hand.
    public var backlog: Int { core.locked { $0.jobs.count + $0.inHand } }

    /// Blocks until no job waits or runs.
    public func waitUntilIdle() { core.waitUntilIdle() }

    /// Takes back the jobs not begun, in order; the batch in hand goes on.
    public func takeQueued() -> [Job] {
        core.locked { queue in
            defer { queue.jobs = [] }
            return queue.jobs
        }
    }

    /// A job the work is done with, when the worker recycles them.
    public func takeReturned() -> Job? { core.locked { $0.returned.popLast() } }

    /// Throws the error that stopped the worker, if one did.
    public func rethrowFailure() throws {
        if let failure = core.locked({ $0.failure }) { throw failure }
    }

    /// Runs what is queued, then ends the thread and waits for it. Later jobs are refused. Idempotent.
    public func stop() { core.end(runQueued: true) }

    /// Drops what is queued (a producer waiting for room is released), then ends the thread and waits for it.
    public func cancel() { core.end(runQueued: false) }

    /// Runs what is queued, ends the thread, and hands back the state (once).
    ///
    /// - Throws: the error that stopped the worker; `.invalidArgument` when the state was handed back already.
    public func finish() throws -> State {
        core.end(runQueued: true)
        try rethrowFailure()
        guard let state = core.takeState() else { throw StoreError(.invalidArgument, "the worker has finished") }
        return state
    }
}

extension SerialWorker {
    /// Queues the job `make` builds around a continuation, and waits until the work resumes it.
    ///
    /// A job that is dropped (``cancel()``, a failure, the worker released with jobs queued) is never run, and
    /// its continuation never resumed: a worker whose jobs carry continuations is ended with ``stop()`` and its
    /// work does not throw.
    ///
    /// - Parameter stopped: thrown when the worker takes no more jobs.
    public func run<Value: Sendable>(
        ifStopped stopped: @autoclosure () -> any Error,
        _ make: (CheckedContinuation<Value, any Error>) -> Job
    ) async throws -> Value {
        try await withCheckedThrowingContinuation { continuation in
            if !enqueue(make(continuation)) { continuation.resume(throwing: stopped()) }
        }
    }
}

extension SerialWorker {
    /// Queues the job `make` builds around a completion, and blocks the calling thread until the work calls
    /// it (``BlockingWait``): for a caller that is itself a worker's thread, never for a task.
    ///
    /// - Parameters:
    ///   - stopped: returned when the worker takes no more jobs.
    ///   - timeout: how long to wait at most (none: for ever); `timedOut` is returned past it.
    public func runBlocking<Value: Sendable>(
        ifStopped stopped: @autoclosure () -> any Error, timeout: Duration? = nil,
        timedOut: @autoclosure () -> any Error = StoreError(.unavailable, "the worker did not answer in time"),
        _ make: (@escaping @Sendable (Result<Value, any Error>) -> Void) -> Job
    ) -> Result<Value, any Error> {
        switch BlockingWait.wait(timeout: timeout, { complete in enqueue(make(complete)) }) {
        case .completed(let result): result
        case .notStarted: .failure(stopped())
        case .timedOut: .failure(timedOut())
        }
    }
}

/// A job of a ``SerialWorker`` of closures.
public typealias BlockingJob = @Sendable () -> Void

extension SerialWorker where Job == BlockingJob, State == Void {
    /// A worker that runs closures, one at a time, in the order queued.
    public convenience init(name: String) {
        self.init(name: name, state: (), batch: { _ in 1 }, work: { _, jobs in for job in jobs { job() } })
    }

    /// Runs `body` on the worker's thread and returns what it returns: blocking work (an LMDB open, an
    /// `fsync`) awaited from a task without taking a thread of the cooperative pool.
    ///
    /// - Throws: what `body` throws; `StoreError(.unavailable)` once the worker has stopped.
    public func perform<Value: Sendable>(_ body: @escaping @Sendable () throws -> Value) async throws -> Value {
        try await run(ifStopped: StoreError(.unavailable, "the worker has stopped")) { continuation in
            { continuation.resume(with: Result { try body() }) }
        }
    }
}

extension SerialWorker {
    /// The queue and the state, shared by the worker's thread and its callers.
    private final class Core: @unchecked Sendable {
        // @unchecked: `queue` is touched only with `condition` locked (`locked`, `run`, `end`); `state` only
        // by the worker's thread in `run`, and after `end` has seen the thread finish, by `takeState`.
        struct Queue {
            var jobs: [Job] = []
            /// Jobs in the batch the work is running.
            var inHand = 0
            var returned: [Job] = []
            var failure: (any Error)?
            /// No job is taken any more.
            var closed = false
            /// The jobs queued are run before the thread ends (a stop), or dropped (a cancel or a failure).
            var runQueued = true
            var threadEnded = false
        }

        private let condition = NSCondition()
        private var queue = Queue()
        private var state: State?
        private let capacity: Int
        private let recycles: Bool
        private let batch: @Sendable ([Job]) -> Int
        private let work: @Sendable (inout State, [Job]) throws -> Void

        init(
            state: sending State, capacity: Int, recycles: Bool, batch: @escaping @Sendable ([Job]) -> Int,
            work: @escaping @Sendable (inout State, [Job]) throws -> Void
        ) {
            self.state = state
            self.capacity = max(1, capacity)
            self.recycles = recycles
            self.batch = batch
            self.work = work
        }

        func locked<R>(_ body: (inout Queue) throws -> R) rethrows -> R {
            condition.lock()
            defer { condition.unlock() }
            return try body(&queue)
        }

        func enqueue(_ jobs: some Collection<Job>) -> Bool {
            condition.lock()
            defer { condition.unlock() }
            while !queue.closed && queue.jobs.count >= capacity && jobs.count == 1 { condition.wait() }
            guard !queue.closed else { return false }
            queue.jobs.append(contentsOf: jobs)
            condition.broadcast()
            return true
        }

        func waitUntilIdle() {
            condition.lock()
            defer { condition.unlock() }
            while (!queue.jobs.isEmpty || queue.inHand > 0) && !queue.threadEnded { condition.wait() }
        }

        func end(runQueued: Bool) {
            condition.lock()
            defer { condition.unlock() }
            if !queue.closed {
                queue.closed = true
                queue.runQueued = runQueued
                if !runQueued { queue.jobs = [] }
                condition.broadcast()
            }
            while !queue.threadEnded { condition.wait() }
        }

        /// The state, once the thread has ended; `nil` after the first call.
        func takeState() -> State? {
            condition.lock()
            defer { condition.unlock() }
            guard queue.threadEnded else { return nil }
            defer { self.state = nil }
            return state
        }

        func run() {
            guard var state = self.state else { return }
            defer {
                self.state = state
                locked { queue in
                    queue.threadEnded = true
                    condition.broadcast()
                }
            }
            while var jobs = nextBatch() {
                do {
                    try work(&state, jobs)
                } catch {
                    locked { queue in
                        queue.failure = error
                        queue.closed = true
                        queue.jobs = []
                    }
                }
                locked { queue in
                    queue.inHand = 0
                    if recycles {
                        // Moved, not copied: the producer then holds the only reference to each job it takes back.
                        queue.returned.append(contentsOf: jobs.prefix(max(0, capacity - queue.returned.count)))
                        jobs = []
                    }
                    condition.broadcast()
                }
            }
        }

        /// Waits for jobs; takes the next batch. `nil` once closed with nothing (more) to run.
        private func nextBatch() -> [Job]? {
            condition.lock()
            defer { condition.unlock() }
            while queue.jobs.isEmpty && !queue.closed { condition.wait() }
            guard !queue.jobs.isEmpty, queue.runQueued || !queue.closed else { return nil }
            let taken = min(max(1, batch(queue.jobs)), queue.jobs.count)
            let jobs = Array(queue.jobs[..<taken])
            queue.jobs.removeFirst(taken)
            queue.inHand = taken
            condition.broadcast()
            return jobs
        }
    }
}
