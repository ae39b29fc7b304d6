import Foundation
import LedgerCore
import Logging

/// A send whose `audience` event is still to be appended.
package struct PendingAudience: Sendable, Equatable {
    let messageID: UInt64
    let sendSeq: UInt64
}

/// Appends the `audience` event of every send (SPEC §2.4) from a ``SerialWorker`` of its own, so that
/// computing a large audience never holds up the writer: the audience is read from a snapshot (the temporal
/// index makes the state at the send's seq readable at any later time), then recorded through the group
/// committer like any other write.
///
/// Sends reach it as soon as their commit is released (it is one of the ledger's observers: ``CommitRelease``);
/// sends left without an audience by a crash are found when the ledger opens (see ``Ledger``). Recording is
/// idempotent: the store refuses a second audience for a message, so a send queued twice is recorded once.
///
/// - Note: Thread-safe.
final class AudienceRecorder: Sendable {
    typealias Compute = @Sendable ([PendingAudience]) throws -> [AudienceRecord]
    typealias Submit = @Sendable (WriteRequest) -> Result<WriteReceipt, any Error>

    /// Audiences computed in one snapshot and recorded in one request.
    static let batchSize = 256

    private let worker: SerialWorker<PendingAudience, Void>

    /// - Parameters:
    ///   - compute: the audience records of the given sends, read from one snapshot.
    ///   - submit: appends a request and blocks until it is durable.
    init(compute: @escaping Compute, submit: @escaping Submit, logger: Logger) {
        worker = SerialWorker(name: "ledger-audience", state: (), batch: { min($0.count, Self.batchSize) }) {
            _, batch in Self.record(batch, compute: compute, submit: submit, logger: logger)
        }
    }

    /// Queues sends whose audience is to be recorded.
    func enqueue(_ sends: [PendingAudience]) { worker.enqueue(contentsOf: sends) }

    /// Sends committed whose audience is not recorded yet: queued, or being computed and appended. It grows
    /// when sends arrive faster than their audiences can be read and hashed (SHA-256 over every recipient's
    /// device number).
    var backlog: Int { worker.backlog }

    /// Blocks until every queued send has been recorded (or has failed and been logged).
    func waitUntilIdle() { worker.waitUntilIdle() }

    /// Records what is queued, then stops the thread.
    func stop() { worker.stop() }

    /// Computes and appends the batch's audiences. A failure is logged and the sends stay without an
    /// audience until the ledger is next opened, which finds and records them; `ledger verify` reports them.
    private static func record(
        _ batch: [PendingAudience], compute: Compute, submit: Submit, logger: Logger
    ) {
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

extension AudienceRecorder: LedgerCommitObserver {
    /// Queues the released sends whose audience was not appended with them.
    func released(_ commit: ReleasedCommit) {
        if !commit.unrecordedSends.isEmpty { enqueue(commit.unrecordedSends) }
    }
}
