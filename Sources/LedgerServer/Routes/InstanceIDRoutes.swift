import Foundation
import Hummingbird
import LedgerCore
import LedgerStore
import FCMWire

/// The legacy Instance ID API (SPEC §4.3). The admin bearer credential names the project.
struct InstanceIDRoutes {
    let server: ServerContext

    func register(on router: TokenPathRouter) {
        let iid = router.group("/iid").instanceIDRoutes(server, roles: [.admin])
            .group(context: ProjectRequestContext.self)
        iid.post("v1:batchAdd") { request, context in try await batch(request, context, subscribe: true) }
        iid.post("v1:batchRemove") { request, context in try await batch(request, context, subscribe: false) }
        iid.post("v1/:token/rel/topics/:topic") { request, context in try await relate(request, context) }
        // Reading an instance's subscriptions is also the auditor's (docs/server.md).
        router.group("/iid").instanceIDRoutes(server, roles: [.admin, .auditor])
            .group(context: ProjectRequestContext.self)
            .get("info/:token") { request, context in try await info(request, context) }
    }

    private static let invalid = InstanceIDError(status: .badRequest, code: "INVALID_ARGUMENT")

    /// What becomes of one token of a batch.
    private enum Slot {
        case error(String)
        case operation(Int)
    }

    /// `{"to":"/topics/T","registration_tokens":[…]}` → one result per token, in order.
    private func batch(_ request: Request, _ context: ProjectRequestContext, subscribe: Bool) async throws -> Response {
        let caller = context.caller
        let buffer: ByteBuffer
        do {
            buffer = try await JSONBody.bytes(request, limit: server.configuration.maximumBodyBytes)
        } catch let error as FCMError where error.status == .contentTooLarge {
            throw InstanceIDError(status: .contentTooLarge, code: "INVALID_ARGUMENT")
        } catch {
            throw Self.invalid
        }
        guard
            let body = buffer.withUnsafeReadableBytes({ TopicBatchBody(json: $0.assumingMemoryBound(to: UInt8.self)) }),
            let topic = try? TopicName(body.to),
            (1...server.configuration.maximumBatchTokens).contains(body.registrationTokens.count)
        else { throw Self.invalid }
        // Malformed tokens get a per-token INVALID_ARGUMENT and no operation; tokens beyond the project's
        // rate budget get RESOURCE_EXHAUSTED; the rest go in one request.
        // A token named twice is one change: it takes one unit of the budget and shares its outcome.
        let tokens = body.registrationTokens.map { $0.flatMap { try? RegistrationToken($0) } }
        let firstOccurrence = Self.firstOccurrences(of: tokens)
        let distinct = tokens.indices.filter { tokens[$0] != nil && firstOccurrence[$0] == $0 }.count
        var budget = server.subscriptionRate.take(distinct, for: caller.project)
        var operations: [LedgerOperation] = []
        operations.reserveCapacity(distinct)
        var slots: [Slot] = []
        slots.reserveCapacity(tokens.count)
        for (position, token) in tokens.enumerated() {
            guard let token else {
                slots.append(.error("INVALID_ARGUMENT"))
                continue
            }
            let first = firstOccurrence[position]
            if first < position {
                slots.append(slots[first])
                continue
            }
            guard budget > 0 else {
                slots.append(.error("RESOURCE_EXHAUSTED"))
                continue
            }
            budget -= 1
            slots.append(.operation(operations.count))
            operations.append(
                subscribe ? .subscribe(token, topic, via: .iid) : .unsubscribe(token, topic, via: .iid))
        }
        let outcomes: [OperationOutcome]
        if operations.isEmpty {
            outcomes = []
        } else {
            outcomes = try await server.append(
                WriteRequest(actor: caller.actor, requestID: request.ledgerRequestID, operations: operations),
                to: context.ledger
            ).outcomes
        }
        let results = slots.map { slot in
            switch slot {
            case .error(let code): BatchResponse.Result(error: code)
            case .operation(let index): BatchResponse.Result(error: outcomes[index].rejection.map(Self.code(for:)))
            }
        }
        var response = JSONResponse.bytes(BatchResponse(results: results).json)
        if slots.contains(where: { if case .error("RESOURCE_EXHAUSTED") = $0 { true } else { false } }) {
            response.headers[.retryAfter] = String(server.subscriptionRate.retryAfter(for: caller.project))
        }
        return response
    }

    /// For each position, the position where the same token first occurs (itself for a first occurrence or a
    /// malformed token): one hash per token. Counting distinct tokens with a `Set` and then sharing outcomes
    /// through a dictionary hashed each 152-byte token three times — 5 % of the server's samples under the
    /// 1000-token batchAdd load.
    static func firstOccurrences(of tokens: [RegistrationToken?]) -> [Int] {
        var firstPosition: [RegistrationToken: Int] = [:]
        firstPosition.reserveCapacity(tokens.count)
        /// The value `slot` holds: reached through the dictionary's `default:` subscript in place, which finds
        /// the token's entry or inserts this position in one search (a lookup and then an insert searched
        /// twice).
        func value(_ slot: inout Int) -> Int { slot }
        return tokens.enumerated().map { position, token in
            guard let token else { return position }
            return value(&firstPosition[token, default: position])
        }
    }

    /// `{"results":[{},{"error":"NOT_FOUND"},…]}`: one result per token of the request, in order.
    struct BatchResponse: Encodable {
        struct Result: Encodable {
            /// `nil` (an empty object) for a token that succeeded.
            let error: String?
        }
        let results: [Result]

        /// The body, byte for byte what `JSONResponse.encoded` writes (tested): written directly because
        /// `JSONEncoder` took 8 % of the server's samples under the 1000-token batchAdd load.
        var json: [UInt8] {
            var out = Array(#"{"results":["#.utf8)
            out.reserveCapacity(out.count + results.count * 3 + 2)
            for (index, result) in results.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                var object = JSONObjectWriter()
                if let error = result.error { object.field("error", string: error) }
                out.append(contentsOf: object.finishBytes())
            }
            out.append(contentsOf: "]}".utf8)
            return out
        }
    }

    /// `POST /iid/v1/{token}/rel/topics/{topic}`: subscribe one token.
    private func relate(_ request: Request, _ context: ProjectRequestContext) async throws -> Response {
        let caller = context.caller
        guard let token = try? RegistrationToken(try context.parameters.decoded("token")),
            let topic = try? TopicName(try context.parameters.decoded("topic"))
        else { throw Self.invalid }
        guard server.subscriptionRate.take(1, for: caller.project) == 1 else {
            throw InstanceIDError(status: .tooManyRequests, code: "RESOURCE_EXHAUSTED")
        }
        let receipt = try await server.append(
            WriteRequest(
                actor: caller.actor, requestID: request.ledgerRequestID,
                operations: [.subscribe(token, topic, via: .iid)]),
            to: context.ledger)
        if let rejection = receipt.outcomes[0].rejection {
            throw InstanceIDError(
                status: rejection.code == .notFound ? .notFound : .badRequest, code: Self.code(for: rejection))
        }
        return try JSONResponse.encoded(EmptyBody())
    }

    /// `GET /iid/info/{token}?details=true`: the instance's application, platform and topics with add dates.
    private func info(_ request: Request, _ context: ProjectRequestContext) async throws -> Response {
        guard let token = try? RegistrationToken(try context.parameters.decoded("token")) else { throw Self.invalid }
        let details = request.uri.queryParameters["details"] == "true"
        let body: InstanceInfoBody? = try context.ledger.read { snapshot in
            guard let instance = try snapshot.instanceID(of: token), let info = try snapshot.instance(instance),
                info.registeredSince != nil
            else { return nil }
            var relations: InstanceInfoBody.Relations?
            if details {
                var topics: [String: InstanceInfoBody.AddDate] = [:]
                for subscription in try snapshot.subscriptions(of: instance) {
                    guard let name = try snapshot.topicName(of: subscription.topic),
                        let event = try snapshot.event(at: subscription.since)
                    else {
                        throw StoreError(.corrupt, "subscription of topic \(subscription.topic) has no name or event")
                    }
                    topics[name.rawValue] = InstanceInfoBody.AddDate(addDate: event.time.date)
                }
                relations = InstanceInfoBody.Relations(topics: topics)
            }
            return InstanceInfoBody(application: info.appID, platform: info.platform?.uppercased(), rel: relations)
        }
        guard let body else { throw InstanceIDError(status: .notFound, code: "NOT_FOUND") }
        return try JSONResponse.encoded(body)
    }

    private static func code(for rejection: OperationRejection) -> String {
        switch rejection.code.kind {
        case .notFound: "NOT_FOUND"
        case .tooManyTopics: "TOO_MANY_TOPICS"
        // IID subscribes and removes never ask to fail on an existing subscription, nor set APNs tokens.
        case .alreadyExists, .wrongPlatform: "INTERNAL"
        }
    }
}
