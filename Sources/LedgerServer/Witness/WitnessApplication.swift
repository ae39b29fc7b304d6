import Foundation
import HTTPTypes
import Hummingbird
import LedgerCore
import LedgerQueries
import LedgerStore
import Logging
import Synchronization

/// `ledger witness`: a C2SP tlog-witness. It serves `POST /add-checkpoint` for the logs it is configured with,
/// checks each checkpoint against the latest it cosigned for that origin, and cosigns it (C2SP
/// tlog-cosignature, `cosignature/v1`) — or answers the spec's error, keeping as evidence what a third party can
/// check: two checkpoints the log signed of one size with different roots (``WitnessStore``).
public struct WitnessSettings: Sendable {
    public var host: String
    public var port: Int
    /// The signed-note keys trusted for each log origin.
    public var logKeys: [String: [NoteVerifier]]
    /// The timeouts and caps of every connection: `ledger serve`'s limits, with a public witness's defaults.
    public var connections: ConnectionLimits

    public init(
        host: String, port: Int, logKeys: [String: [NoteVerifier]], connections: ConnectionLimits = .witness
    ) {
        self.host = host
        self.port = port
        self.logKeys = logKeys
        self.connections = connections
    }
}

/// The largest add-checkpoint body read: 63 proof lines, and a checkpoint with room for many signatures.
let maximumAddCheckpointBytes = 64 * 1024

/// The witness's HTTP application: `POST /add-checkpoint`, `GET /healthz` and `GET /metrics`, each connection held
/// to ``WitnessSettings/connections`` by the code `ledger serve` uses
/// (``HTTPServerBuilder/limited(_:limiter:certificate:logger:)``; plain HTTP: TLS is a reverse proxy's).
public func buildWitnessApplication(
    settings: WitnessSettings, store: WitnessStore, cosigner: Cosigner, logger: Logger
) -> some ApplicationProtocol {
    let router = Router()
    let limiter = ConnectionLimiter(limits: settings.connections, logger: logger)
    let worker = SerialWorker<BlockingJob, Void>(name: "ledger-witness")
    let refusedProofs = RefusedProofs()
    router.get("healthz") { _, _ in "ok\n" }
    router.post("add-checkpoint") { request, _ -> Response in
        let body: ByteBuffer
        do {
            body = try await request.body.collect(upTo: maximumAddCheckpointBytes)
        } catch {
            return witnessText(.contentTooLarge, "the body is larger than \(maximumAddCheckpointBytes) bytes\n")
        }
        let parsed: AddCheckpointRequest
        do {
            parsed = try AddCheckpointRequest(parsing: String(decoding: body.readableBytesView, as: UTF8.self))
        } catch {
            return witnessText(.badRequest, "\(error)\n")
        }
        let time = UInt64(max(0, Date().timeIntervalSince1970))
        let outcome: WitnessStore.Outcome
        do {
            outcome = try await worker.perform {
                try store.add(parsed, logKeys: settings.logKeys, cosigner: cosigner, time: time)
            }
        } catch {
            logger.error("the witness could not store a checkpoint", metadata: ["error": "\(error)"])
            return witnessText(.serviceUnavailable, "the witness cannot store checkpoints now\n")
        }
        let checkpoint = parsed.note.checkpoint
        let metadata: Logger.Metadata = [
            "witness.origin": "\(checkpoint.origin)", "witness.size": "\(checkpoint.size)",
            "witness.oldSize": "\(parsed.oldSize)",
        ]
        switch outcome.decision {
        case .cosign:
            logger.info("cosigned a checkpoint", metadata: metadata)
            return witnessText(.ok, (outcome.cosignature ?? "") + "\n")
        case .unknownOrigin:
            return witnessText(.notFound, "this witness knows no log of that origin\n")
        case .forbidden:
            return witnessText(.forbidden, "no signature verifies with a key this witness trusts for the origin\n")
        case .oldSizeTooLarge:
            return witnessText(.badRequest, "the old size is above the checkpoint's size\n")
        case .conflict(let latestSize):
            return Response(
                status: .conflict, headers: [.contentType: "text/x.tlog.size"],
                body: ResponseBody(byteBuffer: ByteBuffer(string: "\(latestSize)\n")))
        case .differentRoot:
            if outcome.newEvidence {
                logger.error(
                    "SPLIT VIEW: the log signed two checkpoints of one size with different roots (kept as evidence)",
                    metadata: metadata)
            }
            return witnessText(.conflict, "this size was cosigned with another root hash\n")
        case .badProof:
            // Anyone can write a proof line: a warning, at most once a minute per origin, and nothing kept.
            if refusedProofs.shouldWarn(origin: checkpoint.origin) {
                logger.warning(
                    "a consistency proof did not verify (refused with 422; warned at most once a minute per origin)",
                    metadata: metadata)
            }
            return witnessText(.unprocessableContent, "the consistency proof does not verify\n")
        }
    }
    router.get("metrics") { _, _ -> Response in
        let counters = try await worker.perform { try store.counters() }
        let text = WitnessMetrics.exposition(counters, refusedProofs: refusedProofs.total) + limiter.exposition()
        return Response(
            status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
            body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }
    return Application(
        router: router,
        server: .limited(settings.connections, limiter: limiter, certificate: nil, logger: logger),
        configuration: .init(address: .hostname(settings.host, port: settings.port), serverName: "TopicLedger-witness"),
        onServerRunning: { channel in
            logger.notice(
                "witness listening",
                metadata: [
                    "ledger.address": "\(channel.localAddress?.description ?? "?")",
                    "witness.name": "\(cosigner.name)", "witness.vkey": "\(cosigner.verifier.vkey)",
                ])
        },
        logger: logger)
}

private func witnessText(_ status: HTTPResponse.Status, _ text: String) -> Response {
    Response(
        status: status, headers: [.contentType: "text/plain; charset=utf-8"],
        body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
}

/// The proofs refused (422) since the witness started, and when each origin was last warned of: a failing proof is
/// anyone's to send, so it is warned of at most once a minute per origin, and only counted.
///
/// - Note: Thread-safe.
final class RefusedProofs: Sendable {
    private struct State {
        var total: UInt64 = 0
        var warned: [String: ContinuousClock.Instant] = [:]
    }

    /// The least time between two warnings for one origin.
    static let warningInterval: Duration = .seconds(60)

    private let state = Mutex(State())

    /// Counts a refused proof; whether to warn of it now.
    func shouldWarn(origin: String) -> Bool {
        state.withLock { state in
            state.total &+= 1
            let now = ContinuousClock.now
            if let last = state.warned[origin], now - last < Self.warningInterval { return false }
            // Origins are the configured logs' (an unknown origin is refused before a proof is looked at).
            state.warned[origin] = now
            return true
        }
    }

    var total: UInt64 { state.withLock { $0.total } }
}

/// The witness's Prometheus text (`GET /metrics`): the evidence kept, its bytes, the contradictions not kept past
/// the limit, and the proofs refused.
enum WitnessMetrics {
    static func exposition(_ counters: WitnessStore.Counters, refusedProofs: UInt64) -> String {
        let series: [(String, String, String, String)] = [
            ("topicledger_witness_evidence", "gauge", "Split views kept as evidence", String(counters.evidence)),
            (
                "topicledger_witness_evidence_bytes", "gauge", "Bytes of the evidence kept (at most 1 MiB)",
                String(counters.evidenceBytes)
            ),
            (
                "topicledger_witness_evidence_dropped_total", "counter",
                "Split views not kept because the evidence had reached its limit", String(counters.evidenceDropped)
            ),
            (
                "topicledger_witness_refused_proofs_total", "counter",
                "Consistency proofs refused (422) since the witness started", String(refusedProofs)
            ),
        ]
        return series.map { name, type, help, value in
            "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n\(name) \(value)\n"
        }
        .joined()
    }
}
