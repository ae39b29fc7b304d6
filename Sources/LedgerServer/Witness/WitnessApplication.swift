import Foundation
import HTTPTypes
import Hummingbird
import LedgerCore
import LedgerQueries
import LedgerStore
import Logging

/// `ledger witness`: a C2SP tlog-witness. It serves `POST /add-checkpoint` for the logs it is configured with,
/// checks each checkpoint against the latest it cosigned for that origin, and cosigns it (C2SP
/// tlog-cosignature, `cosignature/v1`) — or answers the spec's error, keeping every contradiction as evidence.
public struct WitnessSettings: Sendable {
    public var host: String
    public var port: Int
    /// The signed-note keys trusted for each log origin.
    public var logKeys: [String: [NoteVerifier]]

    public init(host: String, port: Int, logKeys: [String: [NoteVerifier]]) {
        self.host = host
        self.port = port
        self.logKeys = logKeys
    }
}

/// The largest add-checkpoint body read: 63 proof lines, and a checkpoint with room for many signatures.
let maximumAddCheckpointBytes = 64 * 1024

/// The witness's HTTP application: `POST /add-checkpoint` and `GET /healthz`.
public func buildWitnessApplication(
    settings: WitnessSettings, store: WitnessStore, cosigner: Cosigner, logger: Logger
) -> some ApplicationProtocol {
    let router = Router()
    let worker = SerialWorker<BlockingJob, Void>(name: "ledger-witness")
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
            logger.error(
                "SPLIT VIEW: a validly signed checkpoint has the latest cosigned size and another root (kept as evidence)",
                metadata: metadata)
            return witnessText(.conflict, "this size was cosigned with another root hash\n")
        case .inconsistent:
            logger.error(
                "SPLIT VIEW: a validly signed checkpoint is inconsistent with the latest cosigned one (kept as evidence)",
                metadata: metadata)
            return witnessText(.unprocessableContent, "the consistency proof does not verify\n")
        }
    }
    return Application(
        router: router,
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
