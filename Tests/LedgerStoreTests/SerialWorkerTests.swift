import Foundation
import LedgerStore
import Synchronization
import Testing
import LedgerTestSupport

/// The one building block for blocking work: order, state, back-pressure, failure, and its bridges.
@Suite("Serial worker", .offThePool)
struct SerialWorkerTests {
    struct Failure: Error, Equatable {}

    @Test("jobs run in the order queued, a batch at a time, and finish() hands back the state they built")
    func orderAndState() throws {
        let worker = SerialWorker<Int, [Int]>(name: "test-order", state: [], batch: { min($0.count, 3) }) {
            state, jobs in
            #expect(jobs.count <= 3)
            state.append(contentsOf: jobs)
        }
        for job in 0..<100 { #expect(worker.enqueue(job)) }
        #expect(worker.enqueue(contentsOf: Array(100..<200)))
        #expect(try worker.finish() == Array(0..<200))
        // Stopped: later jobs are refused, and the state is handed back once.
        #expect(!worker.enqueue(200))
        #expect(throws: StoreError.self) { try worker.finish() }
    }

    @Test("a job that throws stops the worker: the jobs after it are dropped, later ones refused, the error kept")
    func failureStops() throws {
        let gate = DispatchSemaphore(value: 0)
        let worker = SerialWorker<Int, [Int]>(name: "test-failure", state: [], batch: { _ in 1 }) { state, jobs in
            if jobs == [0] { gate.wait() }
            if jobs == [2] { throw Failure() }
            state.append(contentsOf: jobs)
        }
        for job in 0..<5 { worker.enqueue(job) }
        gate.signal()
        worker.waitUntilIdle()
        #expect(!worker.enqueue(9))
        #expect(throws: Failure.self) { try worker.rethrowFailure() }
        #expect(throws: Failure.self) { try worker.finish() }
    }

    @Test("with a capacity, enqueue waits for room; cancel drops what waits and releases the producer")
    func capacity() throws {
        let started = DispatchSemaphore(value: 0)
        let gate = DispatchSemaphore(value: 0)
        let ran = Mutex<[Int]>([])
        let worker = SerialWorker<Int, Void>(name: "test-capacity", state: (), capacity: 2, batch: { _ in 1 }) {
            _, jobs in
            if jobs == [0] {
                started.signal()
                gate.wait()
            }
            ran.withLock { $0 += jobs }
        }
        worker.enqueue(0)
        started.wait()  // job 0 is in hand, held at the gate
        worker.enqueue(1)
        worker.enqueue(2)
        #expect(worker.backlog == 3)
        let refused = Mutex<Bool?>(nil)
        Thread.detachNewThread {
            let queued = worker.enqueue(3)  // waits: two are queued
            refused.withLock { $0 = !queued }
        }
        usleep(50_000)
        #expect(refused.withLock { $0 } == nil, "the producer waits for room")
        let cancelled = Mutex(false)
        Thread.detachNewThread {
            worker.cancel()  // drops 1 and 2, releases the producer, then waits for job 0
            cancelled.withLock { $0 = true }
        }
        while refused.withLock({ $0 }) == nil { usleep(1_000) }
        #expect(refused.withLock { $0 } == true, "the waiting job is refused once cancelled")
        #expect(!cancelled.withLock { $0 }, "cancel waits for the job in hand")
        gate.signal()
        while !cancelled.withLock({ $0 }) { usleep(1_000) }
        #expect(ran.withLock { $0 } == [0])
    }

    @Test("finished jobs come back to the producer when the worker recycles them")
    func recycling() throws {
        let worker = SerialWorker<[Int], Int>(name: "test-recycle", state: 0, capacity: 4, recyclesJobs: true) {
            total, batches in
            for batch in batches { total += batch.reduce(0, +) }
        }
        worker.enqueue(Array(repeating: 1, count: 1_000))
        worker.waitUntilIdle()
        let returned = worker.takeReturned()
        #expect(returned?.count == 1_000)
        #expect(worker.takeReturned() == nil)
        #expect(try worker.finish() == 1_000)
    }

    @Test("a task awaits blocking work with perform; a stopped worker refuses it")
    func perform() async throws {
        let worker = SerialWorker<BlockingJob, Void>(name: "test-perform")
        // Every job on the worker's one thread, which is not the task's (a thread of the cooperative pool).
        let first = try await worker.perform { pthread_self() }
        let second = try await worker.perform { pthread_self() }
        #expect(first == second)
        #expect(first != pthread_self())
        await #expect(throws: Failure.self) { try await worker.perform { throw Failure() } }
        worker.stop()
        await #expect(throws: StoreError.self) { try await worker.perform { 1 } }
    }

    @Test("a thread waits for a job's answer with runBlocking")
    func runBlocking() throws {
        let worker = SerialWorker<@Sendable () -> Int, [Int]>(name: "test-blocking", state: []) { state, jobs in
            for job in jobs { state.append(job()) }
        }
        let outcome = worker.runBlocking(ifStopped: Failure()) {
            (complete: @escaping @Sendable (Result<Int, any Error>) -> Void) in
            {
                complete(.success(42)); return 42
            }
        }
        #expect(try outcome.get() == 42)
        worker.stop()
        let refused = worker.runBlocking(ifStopped: Failure()) {
            (complete: @escaping @Sendable (Result<Int, any Error>) -> Void) in
            {
                complete(.success(1)); return 1
            }
        }
        #expect(throws: Failure.self) { try refused.get() }
    }

    @Test("a thread's wait ends at its timeout when the job does not answer, with the timeout's error")
    func runBlockingTimesOut() throws {
        struct Late: Error {}
        let worker = SerialWorker<@Sendable () -> Int, [Int]>(name: "test-late", state: []) { state, jobs in
            for job in jobs { state.append(job()) }
        }
        defer { worker.stop() }
        // The job completes nobody: the waiting thread gives up after its timeout.
        let outcome = worker.runBlocking(ifStopped: Failure(), timeout: .milliseconds(50), timedOut: Late()) {
            (_: @escaping @Sendable (Result<Int, any Error>) -> Void) in
            { 0 }
        }
        #expect(throws: Late.self) { try outcome.get() }
    }
}
