import AsyncHTTPClient
import Foundation
import LedgerCore
import LedgerQueries
import LedgerStore
import Logging
import NIOCore
import NIOHTTP1
import Synchronization

/// One project's witnesses (``WitnessRequirement``): submits each new signed checkpoint to every witness with
/// C2SP tlog-witness's `add-checkpoint`, keeps the checkpoint once a quorum has cosigned it (`cosigned.jsonl`,
/// through the caller's `keep`), and remembers what each witness last answered, for `/readyz` and the metrics.
///
/// One round at a time, for real: an actor alone would not do, since it takes other calls at each `await` of a
/// round. A call that finds a round in flight joins it when that round's checkpoint is at least as large as its
/// own (it answers with what the round leaves), and otherwise queues behind it and looks again; only then does
/// it submit. So each witness sees one submission of this project at a time, and the size tracked for it between
/// rounds (the protocol's old size) is the one it last answered. ``latest`` only moves forward (by tree size).
///
/// A witness's answer is taken as input, not as truth: a 409 whose size is above the submitted checkpoint's fails
/// that witness for the round only, and its next round starts from the size it last cosigned for this server
/// (or 0); a cosignature dated 0, or more than ``cosignatureLead`` ahead of the server's clock, is refused. Each
/// problem is logged once when it starts and once when it ends (``WitnessProblem/Kind``).
actor CheckpointWitnesses {
    /// What one witness last answered.
    struct Status: Sendable, Equatable {
        var name: String
        var url: String
        /// The size the witness is known to hold (from its cosignature or its 409), nil before its first answer.
        var knownSize: UInt64?
        /// The largest size it cosigned for this server.
        var cosignedSize: UInt64?
        /// Why its last submission failed, nil when it cosigned.
        var problem: WitnessProblem?
    }

    /// What the readiness probe and the metrics read without waiting on a submission.
    struct Report: Sendable {
        var statuses: [Status]
        var cosignedSize: UInt64?
        /// Whether the last submission reached the quorum.
        var quorumMissing: Bool
    }

    /// The timeout of one `add-checkpoint` call.
    static let requestTimeout = TimeAmount.seconds(3)
    /// Submissions of one checkpoint to one witness: the first, and retries after 409s that tell its size.
    static let attempts = 3
    /// How far ahead of the server's clock a cosignature may be dated (seconds): clocks drift, a witness's day
    /// does not start early.
    static let cosignatureLead: UInt64 = 600

    let requirement: WitnessRequirement
    private let logger: Logger
    private var statuses: [Status]
    /// The latest checkpoint a quorum cosigned, with their lines; it only grows.
    private(set) var latest: SignedNote?
    /// The size of the checkpoint whose round is in flight; nil when none is.
    private var roundSize: UInt64?
    /// The calls waiting for the round in flight to end, each resumed once when it does.
    private var waiting: [CheckedContinuation<Void, Never>] = []
    /// Seconds since the Unix epoch, what a cosignature's time is checked against.
    private let clock: @Sendable () -> UInt64
    nonisolated let report: Mutex<Report>

    /// - Parameter lastCosigned: the last cosigned checkpoint kept (`cosigned.jsonl`, read by the caller off the
    ///   cooperative pool), nil when none is.
    /// - Parameter clock: seconds since the Unix epoch (a test's, to date cosignatures against).
    init(
        requirement: WitnessRequirement, lastCosigned: SignedNote?, logger: Logger,
        clock: @escaping @Sendable () -> UInt64 = { UInt64(clamping: CheckpointKeeper.wallClock()) }
    ) {
        self.requirement = requirement
        self.logger = logger
        self.clock = clock
        statuses = requirement.witnesses.map { Status(name: $0.key.name, url: $0.url) }
        latest = lastCosigned
        report = Mutex(Report(statuses: statuses, cosignedSize: lastCosigned?.checkpoint.size, quorumMissing: false))
    }

    /// The latest checkpoint with the quorum's cosignatures, after submitting `signed` when it is newer: `signed`
    /// cosigned, or the last one that was, or nil when none ever was.
    ///
    /// Waits for a round in flight first: joins it when it submits a checkpoint at least as large as `signed`,
    /// queues behind it otherwise.
    ///
    /// - Parameter proof: the consistency proof of the log from an old size to `signed`'s.
    /// - Parameter keep: makes the cosigned note durable (``CheckpointKeeper/keepCosigned(size:note:)``, off the
    ///   cooperative pool).
    func cosigned(
        _ signed: SignedNote,
        proof: @escaping @Sendable (UInt64) async throws -> [[UInt8]],
        keep: @Sendable (SignedNote) async throws -> Void
    ) async -> SignedNote? {
        while let inFlight = roundSize {
            await withCheckedContinuation { waiting.append($0) }
            if inFlight >= signed.checkpoint.size { return latest }
        }
        if let latest, latest.checkpoint.size >= signed.checkpoint.size { return latest }
        roundSize = signed.checkpoint.size
        await submit(signed, proof: proof, keep: keep)
        roundSize = nil
        let woken = waiting
        waiting.removeAll()
        for continuation in woken { continuation.resume() }
        return latest
    }

    /// One round: `note` to every witness at once, then their answers recorded, and the note kept and made
    /// ``latest`` when a quorum cosigned it.
    private func submit(
        _ note: SignedNote, proof: @escaping @Sendable (UInt64) async throws -> [[UInt8]],
        keep: @Sendable (SignedNote) async throws -> Void
    ) async {
        let now = clock()
        let submissions = requirement.witnesses.enumerated().map { index, witness in
            Submission(witness: witness, knownSize: statuses[index].knownSize, now: now)
        }
        let answers = await withTaskGroup(of: (Int, Submission.Answer).self) { group in
            for (index, submission) in submissions.enumerated() {
                group.addTask { (index, await submission.run(note, proof: proof)) }
            }
            var answers: [Int: Submission.Answer] = [:]
            for await (index, answer) in group { answers[index] = answer }
            return answers
        }
        var lines: [String] = []
        for (index, answer) in answers.sorted(by: { $0.key < $1.key }) {
            let before = statuses[index].problem
            if answer.startAgain {
                // What it told is not believed: the next round starts from what it last cosigned here.
                statuses[index].knownSize = statuses[index].cosignedSize
            } else {
                statuses[index].knownSize = answer.knownSize ?? statuses[index].knownSize
            }
            statuses[index].problem = answer.problem
            if let line = answer.cosignature {
                lines.append(line)
                statuses[index].cosignedSize = note.checkpoint.size
            }
            // A problem is the same while its kind is: its numbers (sizes, times) change from round to round.
            if let problem = answer.problem, problem.kind != before?.kind {
                logger.warning(
                    "a witness did not cosign the project's checkpoint",
                    metadata: [
                        "witness.name": "\(statuses[index].name)", "witness.url": "\(statuses[index].url)",
                        "witness.size": "\(note.checkpoint.size)", "error": "\(problem)",
                    ])
            } else if answer.problem == nil, before != nil {
                logger.notice(
                    "a witness cosigns the project's checkpoints again",
                    metadata: ["witness.name": "\(statuses[index].name)"])
            }
        }
        let quorumMet = lines.count >= requirement.quorum
        if quorumMet, (latest?.checkpoint.size).map({ $0 < note.checkpoint.size }) ?? true {
            let cosigned = note.adding(lines)
            do {
                try await keep(cosigned)
                latest = cosigned
            } catch {
                logger.error("could not keep a cosigned checkpoint", metadata: ["error": "\(error)"])
            }
        }
        let snapshot = Report(statuses: statuses, cosignedSize: latest?.checkpoint.size, quorumMissing: !quorumMet)
        report.withLock { $0 = snapshot }
    }

    /// One checkpoint's submission to one witness, run outside the actor.
    private struct Submission: Sendable {
        struct Answer: Sendable {
            var cosignature: String?
            var knownSize: UInt64?
            var problem: WitnessProblem?
            /// The witness told what cannot be (a size above the checkpoint's): its next round starts again from
            /// the size it last cosigned here, or 0.
            var startAgain = false
        }

        let witness: WitnessRequirement.Witness
        let knownSize: UInt64?
        /// The server's clock when the round started (seconds since the Unix epoch).
        let now: UInt64

        func run(_ note: SignedNote, proof: @Sendable (UInt64) async throws -> [[UInt8]]) async -> Answer {
            // A size kept between rounds is at most one this server's checkpoints reached, so at most this one's
            // but for a checkpoint older than the last round's: then the witness is asked from 0 and says its size.
            var old = knownSize.flatMap { $0 <= note.checkpoint.size ? $0 : nil } ?? 0
            var answer = Answer()
            for _ in 0..<CheckpointWitnesses.attempts {
                let body: String
                do {
                    body =
                        AddCheckpointRequest(oldSize: old, proof: old == 0 ? [] : try await proof(old), note: note)
                        .text
                } catch {
                    answer.problem = WitnessProblem(.noProof, "no consistency proof from size \(old): \(error)")
                    return answer
                }
                var request = HTTPClientRequest(url: witness.url + "/add-checkpoint")
                request.method = .POST
                request.headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
                request.body = .bytes(ByteBuffer(string: body))
                let status: UInt
                let text: String
                let contentType: String?
                do {
                    let response = try await ClusterForwarder.client.execute(
                        request, timeout: CheckpointWitnesses.requestTimeout)
                    let bytes = try await response.body.collect(upTo: 64 * 1024)
                    status = response.status.code
                    text = String(decoding: bytes.readableBytesView, as: UTF8.self)
                    contentType = response.headers.first(name: "Content-Type")
                } catch {
                    answer.problem = WitnessProblem(.unreachable, "unreachable: \(error)")
                    return answer
                }
                switch status {
                case 200:
                    answer.problem = nil  // a 409 before it told the witness's size; this is its cosignature
                    let lines = text.split(separator: "\n").map(String.init)
                    guard
                        let (line, time) = lines.lazy.compactMap({ line in
                            witness.key.cosignedTime(of: note.adding([line])).map { (line, $0) }
                        }).first
                    else {
                        answer.problem = WitnessProblem(
                            .noCosignature, "200 without a valid cosignature by \(witness.key.name)")
                        return answer
                    }
                    // cosignedTime refuses times above 2^63 - 1, so the sum cannot overflow.
                    guard time != 0, time <= now + CheckpointWitnesses.cosignatureLead else {
                        answer.problem = WitnessProblem(
                            .cosignatureTime,
                            "the cosignature's time \(time) is 0 or more than \(CheckpointWitnesses.cosignatureLead) s "
                                + "ahead of the server's clock (\(now)); refused")
                        return answer
                    }
                    answer.cosignature = line
                    answer.knownSize = note.checkpoint.size
                    return answer
                case 409 where contentType?.hasPrefix("text/x.tlog.size") == true:
                    guard let size = Checkpoint.decimal(Substring(text.trimmingCharacters(in: .newlines))) else {
                        answer.problem = WitnessProblem(.sizeNotDecimal, "409 with a size that is not a decimal")
                        return answer
                    }
                    // A witness holds no size above what this log signed: the answer is wrong, this round only.
                    guard size <= note.checkpoint.size else {
                        answer.problem = WitnessProblem(
                            .sizeAboveCheckpoint,
                            "409: the witness told size \(size), above this checkpoint's \(note.checkpoint.size); "
                                + "its next round starts from the size it last cosigned")
                        answer.knownSize = nil
                        answer.startAgain = true
                        return answer
                    }
                    answer.knownSize = size
                    answer.problem = WitnessProblem(.sizeMoving, "409: the witness holds size \(size), not \(old)")
                    old = size
                case 409:
                    answer.problem = WitnessProblem(
                        .differentRoot,
                        "409: the witness cosigned another root at size \(note.checkpoint.size) — a split view, or a "
                            + "forked log (the witness keeps it as evidence)")
                    return answer
                case 403:
                    answer.problem = WitnessProblem(
                        .untrusted, "403: the witness trusts no key that signed this checkpoint")
                case 404:
                    answer.problem = WitnessProblem(
                        .unknownLog, "404: the witness knows no log of origin \(note.checkpoint.origin)")
                case 422:
                    answer.problem = WitnessProblem(
                        .inconsistent, "422: the witness finds this checkpoint inconsistent with the one it holds")
                case 400:
                    answer.problem = WitnessProblem(.malformed, "400: the witness refused the request as malformed")
                default: answer.problem = WitnessProblem(.unexpectedStatus, "HTTP \(status)")
                }
                if status != 409 { return answer }
            }
            return answer
        }
    }
}
