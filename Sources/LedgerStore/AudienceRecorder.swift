import Foundation
import LedgerCore
import Logging

/// A send whose `audience` event is still to be appended.
struct PendingAudience: Sendable, Equatable {
    let messageID: UInt64
    let sendSeq: UInt64
}

/// Appends the `audience` event of every send (SPEC §2.4) from its own thread, so that computing a large
/// audience never holds up the writer: the audience is read from a snapshot (the temporal index makes the
/// state at the send's seq readable at any later time), then recorded through the group committer like any
/// other write.
///
/// Sends reach it from the writer thread as soon as they commit; sends left without an audience by a crash
/// are found when the ledger opens (see ``Ledger``). Recording is idempotent: the store refuses a second
/// audience for a message, so a send queued twice is recorded once.
///
/// - Note: Thread-safe. `queue`, `inFlight` and `stopped` are only touched with `condition` locked.
final class AudienceRecorder: @unchecked Sendable {
    typealias Compute = ([PendingAudience]) throws -> [AudienceRecord]
    typealias Submit = (WriteRequest) -> Result<WriteReceipt, any Error>

    /// Audiences computed in one snapshot and recorded in one request.
    static let batchSize = 256

    private let condition = NSCondition()
    private var queue: [PendingAudience] = []
    private var inFlight = 0
    private var stopped = false
    private let finished = DispatchSemaphore(value: 0)
    private let compute: Compute
    private let submit: Submit
    private let logger: Logger

    /// - Parameters:
    ///   - compute: the audience records of the given sends, read from one snapshot.
    ///   - submit: appends a request and blocks until it is durable.
    init(compute: @escaping Compute, submit: @escaping Submit, logger: Logger) {
        self.compute = compute
        self.submit = submit
        self.logger = logger
        let thread = Thread { [self] in
            // Named from inside: on Linux, Foundation applies a name set before `start()` to no thread (profiles
            // showed the writer under its creator's name).
            Thread.current.name = "ledger-audience"
            run()
        }
        thread.start()
    }

    /// Queues sends whose audience is to be recorded.
    func enqueue(_ sends: [PendingAudience]) {
        guard !sends.isEmpty else { return }
        condition.lock()
        queue.append(contentsOf: sends)
        condition.broadcast()
        condition.unlock()
    }

    /// Sends committed whose audience is not recorded yet: queued, or being computed and appended. It grows
    /// when sends arrive faster than their audiences can be hashed (SHA-256 over every recipient's token).
    var backlog: Int {
        condition.lock()
        defer { condition.unlock() }
        return queue.count + inFlight
    }

    /// Blocks until every queued send has been recorded (or has failed and been logged).
    func waitUntilIdle() {
        condition.lock()
        while !queue.isEmpty || inFlight > 0 { condition.wait() }
        condition.unlock()
    }

    /// Records what is queued, then stops the thread.
    func stop() {
        condition.lock()
        let wasStopped = stopped
        stopped = true
        condition.broadcast()
        condition.unlock()
        if !wasStopped { finished.wait() }
    }

    private func run() {
        while let batch = nextBatch() {
            record(batch)
            condition.lock()
            inFlight = 0
            condition.broadcast()
            condition.unlock()
        }
        finished.signal()
    }

    private func nextBatch() -> [PendingAudience]? {
        condition.lock()
        defer { condition.unlock() }
        while queue.isEmpty && !stopped { condition.wait() }
        if queue.isEmpty { return nil }
        let batch = Array(queue.prefix(Self.batchSize))
        queue.removeFirst(batch.count)
        inFlight = batch.count
        return batch
    }

    /// Computes and appends the batch's audiences. A failure is logged and the sends stay without an
    /// audience until the ledger is next opened, which finds and records them; `ledger verify` reports them.
    private func record(_ batch: [PendingAudience]) {
        let records: [AudienceRecord]
        do {
            records = try compute(batch)
        } catch {
            logger.error(
                "could not compute audiences; they will be recorded when the ledger is next opened",
                metadata: ["ledger.sends": "\(batch.count)", "error": "\(error)"])
            return
        }
        let request = WriteRequest(
            actor: "ledger", requestID: "audience-\(RequestID.random())",
            operations: records.map { .recordAudience($0) })
        switch submit(request) {
        case .success(let receipt):
            for case .rejected(let rejection) in receipt.outcomes where rejection.code != .alreadyExists {
                logger.error("an audience was refused", metadata: ["error": "\(rejection)"])
            }
        case .failure(let error):
            logger.error(
                "could not append audiences; they will be recorded when the ledger is next opened",
                metadata: ["ledger.sends": "\(batch.count)", "error": "\(error)"])
        }
    }
}
