import APNsWire
import FCMWire
import Foundation
import Hummingbird
import LedgerCore
import LedgerStore
import Logging

/// A topic's iOS 18 broadcast channel (docs/server.md, *Broadcast channels*), made in a project with `apns.broadcast`:
///
/// - `POST /v1/projects/{p}/topics/{topic}:createLiveActivityChannel` `{"messageStoragePolicy": 0|1}` (admin): Apple
///   creates the channel (`POST /1/apps/<bundle id>/channels`), the ledger records it (`liveActivityChannelCreated`),
///   and the answer, once that is durable, is the channel (``LiveActivityChannelResource``);
/// - `GET …/topics/{topic}:liveActivityChannel` (admin, auditor): the channel, 404 `NOT_FOUND` when none (errorCode
///   `CHANNEL_NOT_FOUND`, as every answer that a topic has no channel);
/// - `DELETE …/topics/{topic}:liveActivityChannel` (admin): Apple deletes it, the ledger records it
///   (`liveActivityChannelDeleted`), `{}`; Apple's 404 `ChannelNotRegistered` (Apple no longer holds it) is
///   recorded as a deletion too, with that reason. Also once `apns.broadcast` is turned off, with the project's APNs
///   credentials: the channels it made would otherwise stay at Apple, counted towards Apple's limit;
/// - `GET …/liveActivityChannels?pageSize=&pageToken=` (admin, auditor): the channels by topic name;
/// - `GET …/registrations/{token}/liveActivityChannels/{topic}` (the device itself, or admin): the same channel, for an
///   app to start its activity on (`TopicLedgerMessaging`'s `liveActivityChannel(forTopic:)`).
///
/// Refused before Apple is asked, appending nothing: a creation in a project that does not broadcast, a deletion in
/// one without `apns` settings (400 `FAILED_PRECONDITION`), a topic that has a channel (409 `ALREADY_EXISTS`), a body
/// other than the one above (400 `INVALID_ARGUMENT` naming the field; ``LiveActivityChannelBody``), and a project
/// holding ``maximumChannels`` (400 `FAILED_PRECONDITION`, errorCode `TOO_MANY_CHANNELS`). Apple's refusal is answered
/// naming Apple's status and reason, and nothing is recorded.
///
/// A channel Apple created that the ledger then cannot record (the append fails, or another creation for the topic
/// was recorded first) is deleted at Apple again before the answer; if that fails too, one error line names the
/// channel id and the topic (neither is a secret) for an operator to delete it. A crash between Apple's answer and
/// the append leaves such a channel at Apple, unknown to the ledger: docs/server.md says how to find it. So may a
/// creation whose request reached a connection to Apple and got no answer (a timeout, a reset stream, the connection
/// lost): it is answered 503 `UNAVAILABLE` saying the outcome is unknown, counted
/// (`ledger_apns_channel_requests_total{operation="create",outcome="unknown"}`) and logged as an error naming the
/// topic, for an operator to compare Apple's list of the app's channels with the ledger's.
///
/// The limit is counted per project, and before Apple is asked: two creations at once at the limit, or other
/// projects or servers using the same bundle id and APNs environment, can still take Apple's count past it. Apple's
/// own refusal (400 `CannotCreateChannelConfig`) then answers, and nothing is recorded.
///
/// - Note: Never logs provider tokens, keys or payloads.
struct LiveActivityChannelRoutes {
    let server: ServerContext
    /// Apple's limit: 10,000 channels per app and environment ("Sending channel management requests to APNs"),
    /// checked against the project's own channels: the ledger does not record a channel's bundle id or environment
    /// (`LiveActivityChannelCreated`), so channels of other projects using the same app are not counted.
    static let maximumChannels = 10_000
    static let defaultPageSize = 1000
    static let maximumPageSize = 10_000
    static let createSuffix = ":createLiveActivityChannel"
    static let channelSuffix = ":liveActivityChannel"

    func register(on router: TokenPathRouter) {
        let writes = router.group("/v1/projects/:project")
            .projectRoutes(server, roles: [.admin])
            .group(context: ProjectRequestContext.self)
        writes.post("topics/:topic") { request, context in try await create(request, context) }
        writes.delete("topics/:topic") { request, context in try await delete(request, context) }
        let reads = router.group("/v1/projects/:project")
            .projectRoutes(server, roles: [.admin, .auditor])
            .group(context: ProjectRequestContext.self)
        reads.get("topics/:topic") { _, context in
            let topic = try Self.topic(context.parameters, suffix: Self.channelSuffix)
            return try JSONResponse.encoded(try channel(of: topic, in: context.ledger, project: context.project))
        }
        reads.get("liveActivityChannels") { request, context in try await list(request, context) }
        router.group("/v1/projects/:project/registrations/:token/liveActivityChannels/:topic")
            .projectRoutes(server, roles: [.client, .admin])
            .add(middleware: RegistrationInPath(activity: server.ledgers.activity))
            .group(context: RegistrationRequestContext.self)
            .get { _, context in
                let topic = try Self.topic(context.parameters, suffix: nil)
                // A registered device's (the client key alone is in every copy of the app).
                let registered = try context.ledger.read { snapshot in
                    try snapshot.instanceID(of: context.token).map { try snapshot.isRegistered($0) } ?? false
                }
                guard registered else {
                    throw FCMError.notFound("The registration token is not registered.", errorCode: "UNREGISTERED")
                }
                return try JSONResponse.encoded(try channel(of: topic, in: context.ledger, project: context.project))
            }
    }

    /// The topic of the path's `{topic}`, which ends with `suffix` (a custom method, as `:erase`; `nil`: none).
    static func topic(_ parameters: Parameters, suffix: String?) throws -> TopicName {
        var text = try parameters.decoded("topic")
        if let suffix {
            guard text.hasSuffix(suffix) else { throw FCMError.notFound("Unknown route.") }
            text.removeLast(suffix.count)
        }
        do {
            return try TopicName(text, field: "topic")
        } catch {
            throw FCMError.invalidArgument(error)
        }
    }

    /// The topic's channel as answered, or 404 `NOT_FOUND` (errorCode `CHANNEL_NOT_FOUND`).
    private func channel(of topic: TopicName, in ledger: Ledger, project: ProjectID) throws
        -> LiveActivityChannelResource
    {
        try ledger.read { snapshot in
            guard let channel = try snapshot.liveActivityChannel(of: topic) else {
                throw Self.noChannel(topic)
            }
            return try Self.resource(channel, in: snapshot, project: project)
        }
    }

    private static func resource(_ channel: LiveActivityChannel, in snapshot: LedgerSnapshot, project: ProjectID)
        throws -> LiveActivityChannelResource
    {
        guard let event = try snapshot.event(at: channel.createdSeq) else {
            throw StoreError(.corrupt, "no event at seq \(channel.createdSeq)")
        }
        return LiveActivityChannelResource(project: project, channel: channel, created: event.time)
    }

    /// `GET …/liveActivityChannels`: a page of the channels by topic name; the page token is the last topic of the
    /// page before.
    private func list(_ request: Request, _ context: ProjectRequestContext) async throws -> Response {
        let page = try PageRequest(request, defaultSize: Self.defaultPageSize, maximumSize: Self.maximumPageSize)
        if let token = page.after, (try? TopicName(token)) == nil {
            throw FCMError.invalidArgument("pageToken must come from a previous page", field: "pageToken")
        }
        let project = context.project
        return try JSONResponse.encoded(
            try context.ledger.read { snapshot in
                let channels = try snapshot.liveActivityChannels()
                let after =
                    page.after.map { last in channels.firstIndex { $0.topic.rawValue > last } ?? channels.count } ?? 0
                let slice = channels[after...].prefix(page.size)
                let more = after + slice.count < channels.count
                return LiveActivityChannelPage(
                    liveActivityChannels: try slice.map { try Self.resource($0, in: snapshot, project: project) },
                    nextPageToken: more ? slice.last?.topic.rawValue : nil)
            })
    }

    /// The project's channel client, or 400 `FAILED_PRECONDITION` when `creating` and the project does not
    /// broadcast, or when it has no `apns` settings at all.
    private func client(for project: ProjectID, creating: Bool) throws -> any APNsChannelManagement {
        let client: (any APNsChannelManagement)?
        do {
            client = try server.ledgers.apnsProviders.channelManagement(for: project, creating: creating)
        } catch {
            server.ledgers.logger.error(
                "APNs broadcast channels cannot be used: \(error)", metadata: ["ledger.project": "\(project)"])
            throw FCMError.unavailable("The project's APNs settings cannot be used now (the server log says why).")
        }
        guard let client else { throw creating ? Self.notBroadcasting(project) : Self.noCredentials(project) }
        return client
    }

    static func notBroadcasting(_ project: ProjectID) -> FCMError {
        FCMError(
            status: .badRequest, googleStatus: "FAILED_PRECONDITION", errorCode: "FAILED_PRECONDITION",
            message:
                "Project \(project) does not use iOS 18 broadcast channels: its config's apns.broadcast is not true.")
    }

    static func noCredentials(_ project: ProjectID) -> FCMError {
        FCMError(
            status: .badRequest, googleStatus: "FAILED_PRECONDITION", errorCode: "FAILED_PRECONDITION",
            message:
                "Project \(project) has no apns section in its config: its channels cannot be deleted at APNs without its credentials."
        )
    }

    /// `POST …/topics/{topic}:createLiveActivityChannel`.
    private func create(_ request: Request, _ context: ProjectRequestContext) async throws -> Response {
        let topic = try Self.topic(context.parameters, suffix: Self.createSuffix)
        let buffer = try await JSONBody.bytes(request, limit: server.configuration.maximumBodyBytes)
        guard buffer.readableBytes > 0 else {
            throw FCMError.invalidArgument("Request body is empty; a JSON object is expected.")
        }
        let body = try buffer.withUnsafeReadableBytes {
            try LiveActivityChannelBody(json: $0.assumingMemoryBound(to: UInt8.self))
        }
        let project = context.project
        let metrics = server.ledgers.metrics
        var logger = server.ledgers.logger
        logger[metadataKey: "ledger.project"] = "\(project)"
        // Everything the ledger can refuse is refused before the key is read and Apple is asked.
        guard server.configuration.apns[project]?.broadcast == true else { throw Self.notBroadcasting(project) }
        let (existing, count) = try context.ledger.read { snapshot in
            (try snapshot.liveActivityChannel(of: topic), try snapshot.liveActivityChannelCount())
        }
        if existing != nil { throw Self.alreadyExists(topic) }
        guard count < Self.maximumChannels else {
            metrics.recordChannelRequest(operation: "create", outcome: "refused")
            logger.warning("a broadcast channel was refused: the project holds \(count), Apple's limit")
            throw FCMError(
                status: .badRequest, googleStatus: "FAILED_PRECONDITION", errorCode: "TOO_MANY_CHANNELS",
                message:
                    "The project holds \(count) broadcast channels, Apple's limit per app and environment: delete one first."
            )
        }
        let client = try client(for: project, creating: true)
        let answer: APNsChannelClient.Answer
        do {
            answer = try await client.createChannel(messageStoragePolicy: body.messageStoragePolicy)
        } catch let error as APNsChannelClient.NoAnswer where error.mayHaveArrived {
            // Apple may have made a channel whose id the ledger will never learn (Apple chooses it): only its list of
            // the app's channels can tell. The topic names no person; no token, key or payload is logged.
            metrics.recordChannelRequest(operation: "create", outcome: "unknown")
            logger.error(
                "APNs did not answer a broadcast channel's creation after the request went out (\(error)): APNs may have created a channel the ledger does not know; compare its all-channels list (GET /1/apps/<bundle id>/all-channels) with the ledger's (GET …/liveActivityChannels) and delete any it does not show",
                metadata: ["ledger.topic": "\(topic.rawValue)"])
            throw FCMError.unavailable(
                "APNs did not answer the channel's creation, so its outcome is unknown: APNs may hold a channel the ledger did not record (the server log names the topic; compare APNs' list of the app's channels). Nothing was recorded."
            )
        } catch {
            metrics.recordChannelRequest(operation: "create", outcome: "failed")
            logger.error("APNs did not answer a broadcast channel's creation: \(error)")
            throw FCMError.unavailable("APNs did not answer the channel's creation; nothing was recorded. Try again.")
        }
        guard answer.succeeded, let channelID = answer.channelID, Self.isChannelID(channelID) else {
            metrics.recordChannelRequest(operation: "create", outcome: answer.succeeded ? "failed" : "refused")
            if answer.succeeded {
                // Apple says it made a channel but gave no usable id: one it gave is deleted again (it can be
                // named in a header); without one, an operator compares with Apple's list.
                if let given = answer.channelID, Self.isDeletable(given) {
                    await undo(
                        given, topic: topic, client: client, logger: logger,
                        why: "APNs answered \(answer.status) with an apns-channel-id that is not one")
                } else {
                    logger.error(
                        "APNs answered a broadcast channel's creation \(answer.status) without a usable apns-channel-id: APNs may have created a channel; compare with its all-channels list (GET /1/apps/<bundle id>/all-channels)",
                        metadata: [
                            "ledger.topic": "\(topic.rawValue)", "apns.request_id": "\(answer.requestID ?? "")",
                        ])
                }
                throw Self.refusal(answer, doing: "create the channel")
            }
            logger.error(
                "APNs refused a broadcast channel's creation: \(answer.status) \(answer.reason ?? "(no reason)")",
                metadata: ["apns.request_id": "\(answer.requestID ?? "")"])
            throw Self.refusal(answer, doing: "create the channel")
        }
        let change = LiveActivityChannelChange(
            topic: topic, channelID: channelID, messageStoragePolicy: UInt32(body.messageStoragePolicy),
            apnsRequestID: answer.requestID ?? "")
        let outcome: OperationOutcome
        do {
            outcome = try await server.append(
                WriteRequest(
                    actor: context.caller.actor, requestID: request.ledgerRequestID,
                    operations: [.recordLiveActivityChannelCreated(change)]),
                to: context.ledger
            ).outcomes[0]
        } catch {
            metrics.recordChannelRequest(operation: "create", outcome: "failed")
            await undo(channelID, topic: topic, client: client, logger: logger, why: "it could not be recorded")
            throw error
        }
        guard let seq = outcome.seq else {
            // Another creation for the topic was recorded first: this one is deleted at Apple again.
            metrics.recordChannelRequest(operation: "create", outcome: "refused")
            await undo(
                channelID, topic: topic, client: client, logger: logger, why: "the topic got a channel meanwhile")
            throw Self.alreadyExists(topic)
        }
        metrics.recordChannelRequest(operation: "create", outcome: "succeeded")
        let channel = LiveActivityChannel(
            topic: topic, channelID: channelID, messageStoragePolicy: change.messageStoragePolicy, createdSeq: seq)
        return try JSONResponse.encoded(
            try context.ledger.read { try Self.resource(channel, in: $0, project: project) })
    }

    /// `DELETE …/topics/{topic}:liveActivityChannel`.
    private func delete(_ request: Request, _ context: ProjectRequestContext) async throws -> Response {
        let topic = try Self.topic(context.parameters, suffix: Self.channelSuffix)
        let project = context.project
        let metrics = server.ledgers.metrics
        var logger = server.ledgers.logger
        logger[metadataKey: "ledger.project"] = "\(project)"
        // Not only while the project broadcasts: a channel made before `apns.broadcast` was turned off is deleted with
        // the project's credentials all the same.
        guard server.configuration.apns[project] != nil else { throw Self.noCredentials(project) }
        guard let channel = try context.ledger.read({ try $0.liveActivityChannel(of: topic) }) else {
            throw Self.noChannel(topic)
        }
        let client = try client(for: project, creating: false)
        let answer: APNsChannelClient.Answer
        do {
            answer = try await client.deleteChannel(channel.channelID)
        } catch {
            metrics.recordChannelRequest(operation: "delete", outcome: "failed")
            logger.error("APNs did not answer a broadcast channel's deletion: \(error)")
            throw FCMError.unavailable("APNs did not answer the channel's deletion; nothing was recorded. Try again.")
        }
        let reason: String
        if answer.succeeded {
            reason = "deleted"
        } else if Self.isGone(answer) {
            // Apple no longer holds it (deleted by other means): the ledger's channel is gone all the same. Any
            // other 404 (a wrong path, another reason, none) is a refusal like any other, and nothing is recorded.
            reason = "APNs: ChannelNotRegistered"
        } else {
            metrics.recordChannelRequest(operation: "delete", outcome: "refused")
            logger.error(
                "APNs refused a broadcast channel's deletion: \(answer.status) \(answer.reason ?? "(no reason)")",
                metadata: ["apns.request_id": "\(answer.requestID ?? "")"])
            throw Self.refusal(answer, doing: "delete the channel")
        }
        let change = LiveActivityChannelChange(
            topic: topic, channelID: channel.channelID, apnsRequestID: answer.requestID ?? "", reason: reason)
        let outcome: OperationOutcome
        do {
            outcome = try await server.append(
                WriteRequest(
                    actor: context.caller.actor, requestID: request.ledgerRequestID,
                    operations: [.recordLiveActivityChannelDeleted(change)]),
                to: context.ledger
            ).outcomes[0]
        } catch {
            // Apple no longer holds the channel, but the ledger still does: a DELETE again records it (Apple then
            // answers 404 ChannelNotRegistered).
            metrics.recordChannelRequest(operation: "delete", outcome: "failed")
            logger.error(
                "a broadcast channel deleted at APNs could not be recorded: \(type(of: error)); DELETE it again",
                metadata: ["apns.channel_id": "\(channel.channelID)", "ledger.topic": "\(topic.rawValue)"])
            throw FCMError.unavailable(
                "The channel was deleted at APNs, not recorded in the ledger — retry DELETE to record it.")
        }
        guard outcome.seq != nil else {
            throw Self.noChannel(topic)
        }
        metrics.recordChannelRequest(operation: "delete", outcome: "succeeded")
        return try JSONResponse.encoded(EmptyBody())
    }

    /// Deletes at Apple a channel the ledger did not record; says so in one line if that fails too.
    private func undo(
        _ channelID: String, topic: TopicName, client: any APNsChannelManagement, logger: Logger, why: String
    ) async {
        let metadata: Logger.Metadata = ["apns.channel_id": "\(channelID)", "ledger.topic": "\(topic.rawValue)"]
        if let answer = try? await client.deleteChannel(channelID), answer.succeeded || Self.isGone(answer) {
            logger.warning("deleted at APNs a broadcast channel the ledger did not record: \(why)", metadata: metadata)
        } else {
            logger.error(
                "a broadcast channel APNs created is not in the ledger (\(why)) and could not be deleted: delete it at APNs (GET /1/apps/<bundle id>/all-channels lists the app's channels)",
                metadata: metadata)
        }
    }

    /// The topic has no channel: 404 `NOT_FOUND` with errorCode `CHANNEL_NOT_FOUND`, which a client tells apart
    /// from any other 404 (an unknown route is errorCode `NOT_FOUND`).
    static func noChannel(_ topic: TopicName) -> FCMError {
        FCMError.notFound(
            "Topic \(topic.rawValue) has no Live Activity broadcast channel.", errorCode: Self.noChannelErrorCode)
    }

    static let noChannelErrorCode = "CHANNEL_NOT_FOUND"

    static func alreadyExists(_ topic: TopicName) -> FCMError {
        FCMError(
            status: .conflict, googleStatus: "ALREADY_EXISTS", errorCode: "ALREADY_EXISTS",
            message: "Topic \(topic.rawValue) has a Live Activity broadcast channel already.")
    }

    /// Apple's refusal, naming Apple's status and reason: its provider token refused (403) is the project's
    /// credentials (401 `THIRD_PARTY_AUTH_ERROR`, as FCM says it); 429 and 5xx are Apple's to retry (503
    /// `UNAVAILABLE`); any other is 400 `FAILED_PRECONDITION`.
    static func refusal(_ answer: APNsChannelClient.Answer, doing what: String) -> FCMError {
        let said =
            "APNs refused to \(what): \(answer.status) \(answer.reason ?? "(no reason given)"); nothing was recorded."
        switch answer.status {
        case 403:
            return FCMError(
                status: .unauthorized, googleStatus: "UNAUTHENTICATED", errorCode: "THIRD_PARTY_AUTH_ERROR",
                message: said)
        case 429, 500...599:
            return FCMError.unavailable(said)
        case 200..<300:
            return FCMError(
                status: .badGateway, googleStatus: "UNAVAILABLE", errorCode: "UNAVAILABLE",
                message: "APNs answered \(answer.status) without a usable apns-channel-id; nothing was recorded.")
        default:
            return FCMError(
                status: .badRequest, googleStatus: "FAILED_PRECONDITION", errorCode: "FAILED_PRECONDITION",
                message: said)
        }
    }

    /// Apple's answer that it does not hold the channel: 404 with reason `ChannelNotRegistered`, nothing else.
    static func isGone(_ answer: APNsChannelClient.Answer) -> Bool {
        answer.status == 404 && answer.reason == "ChannelNotRegistered"
    }

    /// An `apns-channel-id` that is not a channel id (``isChannelID(_:)``) but can still be sent back in a header to
    /// delete it: 1 to 1024 bytes of printable ASCII.
    static func isDeletable(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= 1024 && text.utf8.allSatisfy { $0 >= 0x21 && $0 <= 0x7E }
    }

    /// A channel id as Apple gives one: base64, at most 256 characters (the ledger stores it, and apps get it).
    static func isChannelID(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= 256
            && text.utf8.allSatisfy { byte in
                (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                    || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "/") || byte == UInt8(ascii: "=")
            }
    }
}
