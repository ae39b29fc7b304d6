import Foundation
import Hummingbird
import LedgerCore
import LedgerStore
import FCMWire

/// FCM v1 topic management, `…/registrations/{token}/topicSubscriptions` (SPEC §4.2): what firebase-admin
/// 7.7 calls, and what a device calls for itself with its client API key (`via` = `client`).
struct TopicSubscriptionRoutes {
    let server: ServerContext
    static let defaultPageSize = 1000
    static let maximumPageSize = 2000

    func register(on router: TokenPathRouter) {
        let base: RouterPath = "/v1/projects/:project/registrations/:token/topicSubscriptions"
        let writes = router.group(base)
            .projectRoutes(server, roles: [.admin, .client])
            .add(middleware: RegistrationInPath(activity: server.ledgers.activity))
            .group(context: RegistrationRequestContext.self)
        writes.post { request, context in try await subscribe(request, context) }
        writes.delete(":topic") { request, context in try await unsubscribe(request, context) }
        let reads = router.group(base)
            .projectRoutes(server, roles: [.admin, .client, .auditor])
            .add(middleware: RegistrationInPath(activity: server.ledgers.activity))
            .group(context: RegistrationRequestContext.self)
        reads.get(":topic") { request, context in try await get(request, context) }
        reads.get { request, context in try await list(request, context) }
    }

    /// The caller, the token of the path and the channel recorded in events.
    private func prepare(_ context: RegistrationRequestContext) throws -> (
        Caller, RegistrationToken, SubscriptionChannel
    ) {
        let caller = context.caller
        return (caller, context.token, caller.role == .client ? .client : .v1)
    }

    private func topicName(_ text: String?, field: String) throws -> TopicName {
        guard let text, !text.isEmpty else { throw FCMError.invalidArgument("topic name is required", field: field) }
        do {
            return try TopicName(text, field: field)
        } catch {
            throw FCMError.invalidArgument(error)
        }
    }

    private func subscribe(_ request: Request, _ context: RegistrationRequestContext) async throws -> Response {
        let (caller, token, via) = try prepare(context)
        let query = request.uri.queryParameters
        let topic = try topicName((query["topicName"] ?? query["topic_name"]).map(String.init), field: "topicName")
        try await JSONBody.requireObjectIfSent(request, limit: server.configuration.maximumBodyBytes)
        let receipt = try await change(
            .subscribe(token, topic, via: via, failIfPresent: true), context, request)
        return JSONResponse.bytes(
            TopicSubscriptionResource(project: caller.project, token: token, topic: topic, created: receipt.time).json)
    }

    private func unsubscribe(_ request: Request, _ context: RegistrationRequestContext) async throws -> Response {
        let (_, token, via) = try prepare(context)
        let topic = try topicName(try context.parameters.decoded("topic"), field: "topic")
        let query = request.uri.queryParameters
        let allowMissing = (query["allowMissing"] ?? query["allow_missing"]).map { $0 == "true" || $0 == "1" } ?? false
        _ = try await change(
            .unsubscribe(token, topic, via: via, failIfAbsent: !allowMissing), context, request)
        return try JSONResponse.encoded(EmptyBody())
    }

    /// Takes the change from the device's budget (a client caller) and the project's, appends `operation`,
    /// and throws the FCM error for a rejection.
    private func change(
        _ operation: LedgerOperation, _ context: RegistrationRequestContext, _ request: Request
    ) async throws -> WriteReceipt {
        let (caller, token) = (context.caller, context.token)
        if caller.role == .client {
            try server.take(
                server.deviceSubscriptionRate, for: DeviceKey(project: caller.project, token: token),
                "This device's subscription changes are over their rate; retry later")
        }
        try server.takeSubscriptionChange(for: caller.project)
        let receipt = try await server.append(
            WriteRequest(actor: caller.actor, requestID: request.ledgerRequestID, operations: [operation]),
            to: context.ledger)
        if let rejection = receipt.outcomes[0].rejection { throw Self.error(for: rejection, to: caller.role) }
        return receipt
    }

    private func get(_ request: Request, _ context: RegistrationRequestContext) async throws -> Response {
        let (caller, token, _) = try prepare(context)
        let topic = try topicName(try context.parameters.decoded("topic"), field: "topic")
        let created: LedgerTime? = try context.ledger.read { snapshot in
            guard let instance = try registeredInstance(token, snapshot) else {
                throw Self.error(for: .unregistered, to: caller.role)
            }
            guard let topicID = try snapshot.topicID(of: topic),
                let since = try snapshot.subscriptions(of: instance).first(where: { $0.topic == topicID })?.since
            else { return nil }
            return try snapshot.event(at: since)?.time
        }
        guard let created else { throw FCMError.notFound("The registration is not subscribed to topic \(topic).") }
        return try JSONResponse.encoded(
            TopicSubscriptionResource(project: caller.project, token: token, topic: topic, created: created))
    }

    private func list(_ request: Request, _ context: RegistrationRequestContext) async throws -> Response {
        let (caller, token, _) = try prepare(context)
        let pageRequest = try PageRequest(request, defaultSize: Self.defaultPageSize, maximumSize: Self.maximumPageSize)
        let pageSize = pageRequest.size
        let after = pageRequest.after
        let subscriptions: [(TopicName, LedgerTime)] = try context.ledger.read { snapshot in
            guard let instance = try registeredInstance(token, snapshot) else {
                throw Self.error(for: .unregistered, to: caller.role)
            }
            return try snapshot.subscriptions(of: instance).map { entry in
                guard let name = try snapshot.topicName(of: entry.topic),
                    let event = try snapshot.event(at: entry.since)
                else { throw StoreError(.corrupt, "subscription of topic \(entry.topic) has no name or event") }
                return (name, event.time)
            }
        }
        let sorted = subscriptions.sorted { $0.0 < $1.0 }.filter { after == nil || $0.0.rawValue > after! }
        let page = sorted.prefix(pageSize)
        return try JSONResponse.encoded(
            TopicSubscriptionPage(
                topicSubscriptions: page.map {
                    TopicSubscriptionResource(project: caller.project, token: token, topic: $0.0, created: $0.1)
                },
                nextPageToken: sorted.count > pageSize ? page.last?.0.rawValue : nil))
    }

    private func registeredInstance(_ token: RegistrationToken, _ snapshot: LedgerSnapshot) throws -> InstanceID? {
        guard let instance = try snapshot.instanceID(of: token), try snapshot.isRegistered(instance) else { return nil }
        return instance
    }

    /// The FCM error for a store rejection: its `errorCode` is what the SDK reports as the reason. A device
    /// (`role` client) whose token is not registered is told `UNREGISTERED`, which its SDK answers with a new
    /// registration; the backend (the Admin SDK) gets FCM's `NOT_FOUND` for the same.
    static func error(for rejection: OperationRejection, to role: CredentialStore.Role) -> FCMError {
        switch rejection.code.kind {
        case .notFound:
            return FCMError.notFound(
                "Requested entity was not found: \(rejection.message).",
                errorCode: rejection.isUnregistered && role == .client ? "UNREGISTERED" : "NOT_FOUND")
        case .alreadyExists:
            return FCMError(
                status: .conflict, googleStatus: "ALREADY_EXISTS", errorCode: "ALREADY_EXISTS",
                message: "The registration is already subscribed to the topic.")
        case .tooManyTopics:
            return FCMError(
                status: .badRequest, googleStatus: "INVALID_ARGUMENT", errorCode: "TOO_MANY_TOPICS",
                message: "The registration is subscribed to the maximum number of topics.")
        case .wrongPlatform:
            return FCMError.invalidArgument("\(rejection.message).", field: "apnsToken")
        }
    }
}
