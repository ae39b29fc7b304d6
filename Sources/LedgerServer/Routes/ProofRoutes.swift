import Foundation
import Synchronization
import Hummingbird
import LedgerCore
import LedgerStore
import FCMWire
import LedgerQueries

/// Signed checkpoints and proofs, for the auditor and admin credentials (docs/compliance.md):
///
/// - `GET /v1/projects/{p}/ledger:checkpoint`: a signed checkpoint of the log (text/plain, a C2SP note);
/// - `GET /v1/projects/{p}/messages/{id}:proof`: the message's events with inclusion proofs (JSON, as
///   `ledger prove --message`);
/// - `GET /v1/projects/{p}/ledger:consistency?from=M&to=N`: a consistency proof (as `ledger prove
///   --consistency`).
///
/// A checkpoint is signed at most once a second per project: within a second of the last one, or while the
/// log has not grown, the last note is answered again. With witnesses (`projects.<p>.witnesses`), every route
/// answers with the latest checkpoint a quorum of them cosigned, or 503 when none was
/// (``ServerContext/latestCheckpoint(for:of:)``); a consistency proof then ends at most there, and carries it
/// as `toCheckpoint`.
struct ProofRoutes {
    let server: ServerContext

    func register(on router: TokenPathRouter) {
        let project = router.group("/v1/projects/:project")
            .projectRoutes(server, roles: [.auditor, .admin])
            .group(context: ProjectRequestContext.self)
        project.get("ledger:checkpoint") { _, context in try await checkpoint(context) }
        project.get("ledger:consistency") { request, context in try await consistency(request, context) }
        project.get("messages/:messageProof") { _, context in try await messageProof(context) }
    }

    private func checkpoint(_ context: ProjectRequestContext) async throws -> Response {
        let project = context.caller.project
        // The ledger is open (its opening made the project's directory, where a first checkpoint key is made).
        let ledger = context.ledger
        let note = try await server.latestCheckpoint(for: project, of: ledger).text
        return Response(
            status: .ok, headers: [.contentType: "text/plain; charset=utf-8"],
            body: ResponseBody(byteBuffer: ByteBuffer(string: note)))
    }

    private func messageProof(_ context: ProjectRequestContext) async throws -> Response {
        let project = context.caller.project
        let text = try context.parameters.decoded("messageProof")
        guard text.hasSuffix(":proof") else { throw FCMError.notFound("Unknown route.") }
        let idText = text.dropLast(":proof".count)
        let id = try Parameters.messageID(idText)
        let ledger = context.ledger
        // The checkpoint must cover the message's events (its audience once recorded): one signed within the last
        // second may not yet, so wait once for the next checkpoint signed that covers them — the collector's or
        // another request's — up to the end of that second, when this request may sign it (checkpoints stay at
        // most one a second).
        let needed = try ledger.read { snapshot -> UInt64 in
            guard let message = try snapshot.message(id) else {
                throw FCMError.notFound("Message \(id) was not found in project \(project).")
            }
            return min(max(message.sendSeq, message.audienceSeq ?? 0), ledger.acknowledgedSeq)
        }
        var signed = try await server.latestCheckpoint(for: project, of: ledger)
        if signed.checkpoint.size < needed {
            try await server.waitForCheckpoint(covering: needed, of: project)
            signed = try await server.latestCheckpoint(for: project, of: ledger)
        }
        guard signed.checkpoint.size >= needed else {
            var error = FCMError.unavailable(
                "Message \(id) is not yet in a checkpoint its witnesses cosigned; retry (/readyz says why).")
            error.headers[.retryAfter] = "1"
            throw error
        }
        let body = try ledger.read { snapshot -> LedgerProofs.MessageProof in
            guard
                let proof = try LedgerProofs.messageProof(
                    id, in: snapshot, checkpoint: signed.text, size: signed.checkpoint.size)
            else { throw FCMError.notFound("Message \(id) was not found in project \(project).") }
            return proof
        }
        return try JSONResponse.encoded(body)
    }

    private func consistency(_ request: Request, _ context: ProjectRequestContext) async throws -> Response {
        let query = request.uri.queryParameters
        func size(_ name: String) throws -> UInt64? {
            guard let text = query[Substring(name)] else { return nil }
            guard text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }), let value = UInt64(text)
            else { throw FCMError.invalidArgument("\(name) must be a tree size (a decimal number)", field: name) }
            return value
        }
        guard let from = try size("from") else {
            throw FCMError.invalidArgument("from is required: the older tree size", field: "from")
        }
        let to = try size("to")
        let ledger = context.ledger
        // With witnesses, proofs end at most at the latest cosigned checkpoint, which the proof carries.
        let cosigned =
            server.configuration.witnesses[context.caller.project] == nil
            ? nil : try await server.latestCheckpoint(for: context.caller.project, of: ledger)
        var body = try ledger.read { snapshot -> LedgerProofs.ConsistencyProof in
            let head = try cosigned?.checkpoint.size ?? min(snapshot.head().seq, ledger.acknowledgedSeq)
            let to = to ?? head
            guard from <= to, to <= head else {
                throw FCMError.invalidArgument(
                    "from and to must satisfy from ≤ to ≤ \(head), the log's size", field: to > head ? "to" : "from")
            }
            return try LedgerProofs.consistencyProof(from: from, to: to, in: snapshot)
        }
        if let cosigned, body.to == cosigned.checkpoint.size { body.toCheckpoint = cosigned.text }
        return try JSONResponse.encoded(body)
    }
}
