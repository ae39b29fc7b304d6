import Hummingbird
import LedgerCore
import LedgerStore
import FCMWire

/// `POST /v1/projects/{p}/messages:send` (SPEC §4.1) and `GET /v1/projects/{p}/topics`.
struct MessageRoutes {
    let server: ServerContext

    func register(on router: TokenPathRouter) {
        router.group("/v1/projects/:project").projectRoutes(server, roles: [.admin])
            .group(context: ProjectRequestContext.self)
            .post("messages:send") { request, context in try await send(request, context) }
        router.group("/v1/projects/:project")
            .projectRoutes(server, roles: [.admin, .auditor])
            .group(context: ProjectRequestContext.self)
            .get("topics") { request, context in try await listTopics(request, context) }
    }

    /// `GET …/topics?orderBy=name|subscriberCount desc&pageSize=&pageToken=`: topics with their subscriber
    /// counts, a page at a time (default 1,000, at most 10,000). The page token names the last topic of the
    /// previous page and its place in the order, so pages stay in order while counts change between calls.
    private func listTopics(_ request: Request, _ context: ProjectRequestContext) async throws -> Response {
        let page = try PageRequest(request, defaultSize: 1000, maximumSize: 10_000)
        let order: TopicOrder
        switch request.uri.queryParameters["orderBy"].map(String.init) {
        case nil, "name": order = .name
        case "subscriberCount desc": order = .subscribers
        default:
            throw FCMError.invalidArgument("orderBy must be name or \"subscriberCount desc\"", field: "orderBy")
        }
        let topics = try context.ledger.read { try $0.topicsWithCounts(orderedBy: order) }
        var last: TopicCount?
        if let token = page.after {
            guard let topic = Self.topic(fromPageToken: token) else {
                throw FCMError.invalidArgument("pageToken must come from a previous page", field: "pageToken")
            }
            last = topic
        }
        let slice = order.page(of: topics, after: last, size: page.size)
        return try JSONResponse.encoded(
            TopicPage(
                topics: slice.map { TopicPage.Entry(name: $0.topic.rawValue, subscriberCount: $0.subscribers) },
                nextPageToken: slice.endIndex < topics.count ? slice.last.map(Self.pageToken(after:)) : nil))
    }

    /// `<subscribers>.<name>`: names may hold dots, so the count comes first and the name is the rest.
    static func pageToken(after last: TopicCount) -> String { "\(last.subscribers).\(last.topic.rawValue)" }

    static func topic(fromPageToken token: String) -> TopicCount? {
        guard let dot = token.firstIndex(of: "."), let count = Int(token[..<dot]), count >= 0,
            let name = try? TopicName(String(token[token.index(after: dot)...]))
        else { return nil }
        return TopicCount(topic: name, subscribers: count)
    }

    private func send(_ request: Request, _ context: ProjectRequestContext) async throws -> Response {
        let caller = context.caller
        let project = caller.project
        let body = try await JSONBody.parsedObject(request, limit: server.configuration.maximumBodyBytes)
        for key in body.keys where !["message", "validate_only", "validateOnly"].contains(key) {
            throw FCMError.invalidArgument("Unknown field \"\(key)\" in the request.", field: key)
        }
        guard let message = body["message"]?.object else {
            throw FCMError.invalidArgument("message is required and must be an object", field: "message")
        }
        let validateOnlyValue = body["validateOnly"] ?? body["validate_only"]
        if let value = validateOnlyValue, !value.isBoolean {
            throw FCMError.invalidArgument("validate_only must be a boolean", field: "validate_only")
        }
        let precedence = server.configuration.precedence
        let validated: ValidatedMessage
        do {
            validated = try MessageValidation.validate(message, precedence: precedence)
        } catch {
            throw FCMError.invalidArgument(error)
        }
        try Self.checkAPNsPayloadSize(validated, project: project, pushing: server.configuration.apns[project] != nil)
        if validateOnlyValue == .bool(true) {
            // A dry run: validated, nothing appended (FCM answers with a fake id).
            if case .token(let token) = validated.target {
                let registered = try context.ledger.read { snapshot in
                    try snapshot.instanceID(of: token).map { try snapshot.isRegistered($0) } ?? false
                }
                if !registered { throw FCMError.notFound("Requested entity was not found.", errorCode: "UNREGISTERED") }
            }
            return JSONResponse.bytes(MessageName(name: "projects/\(project)/messages/fake_message_id").json)
        }
        try server.takeSend(for: project)
        // A topic's Live Activity send records where it goes, which outlives its content; an update or end goes out as
        // one broadcast if the project broadcasts and the topic has a channel when the send is appended (the writer
        // looks, in the same transaction), to each follower otherwise.
        var topicActivity: TopicActivitySend?
        if case .topic = validated.target {
            let destination = APNsDestination(
                message: DevicePayload.object(ofMessageJSON: validated.json), target: validated.target)
            if destination != .device {
                topicActivity = TopicActivitySend(
                    destination.topicActivity ?? .nowhere,
                    broadcastIfChannel: server.configuration.apns[project]?.broadcast == true)
            }
        }
        var operations: [LedgerOperation] = [
            .send(
                validated.target, precedence: precedence, messageJSON: validated.json, topicActivity: topicActivity)
        ]
        // A topic's Live Activity `end` retires its followers' activity tokens, in the send's own request: the
        // send's pushes go to the tokens held at the send, and nothing after it.
        if let topic = APNsDestination.endsTopicActivity(
            DevicePayload.object(ofMessageJSON: validated.json), target: validated.target)
        {
            operations.append(.endLiveActivities(topic))
        }
        let receipt = try await server.append(
            WriteRequest(actor: caller.actor, requestID: request.ledgerRequestID, operations: operations),
            to: context.ledger)
        switch receipt.outcomes[0] {
        case .sent(_, let messageID):
            return JSONResponse.bytes(MessageName(name: "projects/\(project)/messages/\(messageID)").json)
        case .rejected:
            throw FCMError.notFound("Requested entity was not found.", errorCode: "UNREGISTERED")
        case .appended, .unchanged:
            // A send always appends its `sent` event; anything else is a bug, answered as a 500.
            throw StoreError(.corrupt, "a send was answered without a message id")
        }
    }

    /// The most APNs takes in one payload (its 413 `PayloadTooLarge`).
    static let maximumAPNsPayloadBytes = 4096

    /// Refuses, as FCM does ("message too big"), a message whose iOS payload would not fit in one APNs push:
    /// measured with the longest message id, so that no id the store assigns can push it over. Checked when the
    /// project pushes to APNs (`pushing`), and always for a Live Activity message, whose payload is only ever an
    /// ActivityKit push or a broadcast: Apple takes at most 4 KB (naming `message.apns.payload`), and is not asked
    /// to take more.
    static func checkAPNsPayloadSize(_ message: ValidatedMessage, project: ProjectID, pushing: Bool = true) throws {
        let payload = DevicePayload(
            ofMessageJSON: message.json, messageID: UInt64(Int64.max), target: message.target, project: project,
            platform: .ios)
        // A topic's update or end that goes out as a broadcast has the same payload and the same 4 KB limit.
        let liveActivity = payload.apnsDestination.isLiveActivity
        guard pushing || liveActivity else { return }
        let size = payload.json.count
        guard size <= maximumAPNsPayloadBytes else {
            if liveActivity {
                throw FCMError.invalidArgument(
                    "The Live Activity's payload would be \(size) bytes; an ActivityKit push or broadcast holds at"
                        + " most \(maximumAPNsPayloadBytes)",
                    field: "message.apns.payload")
            }
            throw FCMError.invalidArgument(
                "Message is too big: its APNs payload would be \(size) bytes, over APNs' \(maximumAPNsPayloadBytes)",
                field: "message")
        }
    }
}
