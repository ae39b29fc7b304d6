import Hummingbird
import LedgerCore
import LedgerStore
import FCMWire

/// Erasure of a device's identifiers (docs/compliance.md, "Erasure"), for the admin key only:
///
/// - `POST /v1/projects/{p}/registrations/{token}:erase` with `{"reason": "…"}` → ``ErasureResult``;
///   404 `UNREGISTERED` for a token the ledger does not know (never registered, or erased already);
/// - `POST /v1/projects/{p}/registrations:batchErase` with `{"registrationTokens": […], "reason": "…"}` →
///   one ``ErasureResult`` per token, in order (`NOT_FOUND`, `INVALID_ARGUMENT`).
///
/// A request answers once the erasure is durable and the ledger's file has been compacted, so that no file
/// under the data directory holds the identifiers any more (``LedgerOperation/erase(_:reason:pseudonym:)``).
/// In a cluster the leader answers (a follower forwards) once etcd holds the `erased` event; each follower
/// rewrites and compacts its own copy when it applies it. A reason that holds an identifier is refused
/// (``ReasonIdentifiers``). Nothing here logs a token or the reason.
struct ErasureRoutes {
    let server: ServerContext

    func register(on router: TokenPathRouter) {
        let project = router.group("/v1/projects/:project")
            .projectRoutes(server, roles: [.admin])
            .group(context: ProjectRequestContext.self)
        project.post("registrations:batchErase") { request, context in try await batch(request, context) }
        project.post("registrations/:token") { request, context in try await single(request, context) }
    }

    /// `POST …/registrations/{token}:erase`.
    private func single(_ request: Request, _ context: ProjectRequestContext) async throws -> Response {
        let path = try context.parameters.decoded("token")
        guard path.hasSuffix(":erase") else { throw FCMError.notFound("Unknown route.") }
        let token = try RegistrationToken(String(path.dropLast(":erase".count)), field: "token")
        let body = try await JSONBody.decode(ErasureBody.self, request, limit: server.configuration.maximumBodyBytes)
        guard body.registrationTokens.isEmpty else {
            throw FCMError.invalidArgument(
                "the token is in the path; registrationTokens belongs to registrations:batchErase",
                field: "registrationTokens")
        }
        let result = try await erase([token], reason: body.reason, request, context)[0]
        guard result.error == nil else {
            throw FCMError.notFound(
                "The registration token is not known to the ledger (never registered, or erased already).",
                errorCode: "UNREGISTERED")
        }
        return try JSONResponse.encoded(result)
    }

    /// `POST …/registrations:batchErase`.
    private func batch(_ request: Request, _ context: ProjectRequestContext) async throws -> Response {
        let body = try await JSONBody.decode(ErasureBody.self, request, limit: server.configuration.maximumBodyBytes)
        guard !body.registrationTokens.isEmpty else {
            throw FCMError.invalidArgument(
                "registrationTokens must hold 1 to \(ErasureBody.maximumTokens) tokens", field: "registrationTokens")
        }
        var tokens: [RegistrationToken?] = []
        for text in body.registrationTokens { tokens.append(try? RegistrationToken(text)) }
        let valid = tokens.compactMap { $0 }
        var erased = valid.isEmpty ? [] : try await erase(valid, reason: body.reason, request, context)
        erased.reverse()
        let results = tokens.map { token in
            token == nil ? ErasureResult(error: "INVALID_ARGUMENT") : erased.removeLast()
        }
        return try JSONResponse.encoded(ErasureResults(results: results))
    }

    /// Erases `tokens` in one request; one result per token.
    private func erase(
        _ tokens: [RegistrationToken], reason: String, _ request: Request, _ context: ProjectRequestContext
    ) async throws -> [ErasureResult] {
        let caller = context.caller
        let ledger = context.ledger
        // A reason that holds an identifier would put it back in the log, for ever.
        let refusal = try ledger.read { snapshot in
            try ReasonIdentifiers(reason).refusal(
                erasing: tokens, isKnownToken: { try snapshot.instanceID(of: $0) != nil },
                holdsAnyAPNsToken: { try snapshot.holdsAnyAPNsToken(among: $0) })
        }
        if let refusal { throw FCMError.invalidArgument(refusal.rule.message, field: "reason") }
        let instances = try ledger.read { snapshot in try tokens.map { try snapshot.instanceID(of: $0) } }
        let start = ContinuousClock.now
        let receipt = try await server.append(
            WriteRequest(
                actor: caller.actor, requestID: request.ledgerRequestID,
                operations: tokens.map { .erase($0, reason: reason) }),
            to: ledger)
        server.ledgers.metrics.recordErasure(
            devices: receipt.outcomes.filter { $0.seq != nil }.count, duration: ContinuousClock.now - start)
        // Open streams and long polls of the erased devices end now.
        let notifier = server.ledgers.delivery(for: caller.project).notifier
        for case let instance? in instances { notifier.wake(instance) }
        return try ledger.read { snapshot in
            try receipt.outcomes.map { outcome in
                guard let seq = outcome.seq, let event = try snapshot.event(at: seq),
                    case .erased(let erasure) = event.body
                else { return ErasureResult(error: "NOT_FOUND") }
                return ErasureResult(
                    pseudonym: erasure.pseudonym.rawValue, erasedAtSeq: seq, redactedEvents: erasure.redactedEvents)
            }
        }
    }
}
