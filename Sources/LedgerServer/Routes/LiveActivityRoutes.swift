import Foundation
import Hummingbird
import LedgerCore
import LedgerStore
import FCMWire

/// A device's Live Activities (docs/server.md, *Live Activities*): the topics whose Live Activity it follows, each
/// with the activity's ActivityKit push token, and its push-to-start tokens by ActivityAttributes type.
///
/// - `PUT …/registrations/{token}/liveActivities/{topic}` `{"pushToken": "<hex>"}`: follows the topic's Live
///   Activity (a new token replaces the old); `DELETE` on the same path: follows it no more (200 also when it did
///   not).
/// - `PUT …/registrations/{token}/pushToStartTokens/{attributesType}` `{"pushToken": "<hex>"}`: the device's
///   push-to-start token for that type.
/// - `GET …/registrations/{token}/liveActivities`: what the device holds now, both kinds (the auditor may read it).
///
/// Under the device's own credential (its client key and its token in the path) or the admin's, as its APNs token.
/// Each change is an event, durable before the answer, and counts against the device's budget of changes.
///
/// - Note: Never logs the tokens.
struct LiveActivityRoutes {
    let server: ServerContext

    func register(on router: TokenPathRouter) {
        let follows = router.group("/v1/projects/:project/registrations/:token/liveActivities")
            .projectRoutes(server, roles: [.client, .admin])
            .add(middleware: RegistrationInPath(activity: server.ledgers.activity))
            .group(context: RegistrationRequestContext.self)
        follows.put(":topic") { request, context in
            let topic = try topicName(try context.parameters.decoded("topic"))
            let body = try await JSONBody.decode(
                ActivityTokenBody.self, request, limit: server.configuration.maximumBodyBytes)
            try await change(.followLiveActivity(context.token, topic, pushToken: body.pushToken), context, request)
            return try JSONResponse.encoded(
                LiveActivityFollowReply(topic: topic.rawValue, pushToken: body.pushToken.hex))
        }
        follows.delete(":topic") { request, context in
            let topic = try topicName(try context.parameters.decoded("topic"))
            try await JSONBody.requireObjectIfSent(request, limit: server.configuration.maximumBodyBytes)
            let reason = context.caller.role == .client ? "deleted by the device" : "deleted by the server"
            try await change(.unfollowLiveActivity(context.token, topic, reason: reason), context, request)
            return try JSONResponse.encoded(EmptyBody())
        }
        router.group("/v1/projects/:project/registrations/:token/liveActivities")
            .projectRoutes(server, roles: [.client, .admin, .auditor])
            .add(middleware: RegistrationInPath(activity: server.ledgers.activity))
            .group(context: RegistrationRequestContext.self)
            .get { _, context in try list(context) }
        let starts = router.group("/v1/projects/:project/registrations/:token/pushToStartTokens")
            .projectRoutes(server, roles: [.client, .admin])
            .add(middleware: RegistrationInPath(activity: server.ledgers.activity))
            .group(context: RegistrationRequestContext.self)
        starts.put(":attributesType") { request, context in
            let type = try context.parameters.decoded("attributesType")
            guard LiveActivityScope.isValidAttributesType(type) else {
                throw FCMError.invalidArgument(
                    "attributesType must be the name of an ActivityAttributes type: 1 to"
                        + " \(LiveActivityScope.maximumAttributesTypeBytes) letters, digits, _ and ., not starting"
                        + " with a digit or .",
                    field: "attributesType")
            }
            let body = try await JSONBody.decode(
                ActivityTokenBody.self, request, limit: server.configuration.maximumBodyBytes)
            try await change(
                .setPushToStartToken(context.token, attributesType: type, pushToken: body.pushToken), context, request)
            return try JSONResponse.encoded(PushToStartTokenReply(attributesType: type, pushToken: body.pushToken.hex))
        }
    }

    /// The Live Activities the registration follows and its push-to-start tokens, now, sorted.
    private func list(_ context: RegistrationRequestContext) throws -> Response {
        let (caller, token) = (context.caller, context.token)
        let reply = try context.ledger.read { snapshot -> LiveActivitiesReply in
            guard let instance = try snapshot.instanceID(of: token), try snapshot.isRegistered(instance) else {
                throw TopicSubscriptionRoutes.error(for: .unregistered, to: caller.role)
            }
            var follows: [LiveActivityFollowReply] = []
            var starts: [PushToStartTokenReply] = []
            for held in try snapshot.liveActivityTokens(of: instance) where held.interval.end == nil {
                switch held.scope {
                case .topic(let id):
                    guard let name = try snapshot.topicName(of: id) else {
                        throw StoreError(.corrupt, "a followed topic \(id) has no name")
                    }
                    follows.append(LiveActivityFollowReply(topic: name.rawValue, pushToken: held.token.hex))
                case .pushToStart(let type):
                    starts.append(PushToStartTokenReply(attributesType: type, pushToken: held.token.hex))
                }
            }
            return LiveActivitiesReply(
                liveActivities: follows.sorted { $0.topic < $1.topic },
                pushToStartTokens: starts.sorted { $0.attributesType < $1.attributesType })
        }
        return try JSONResponse.encoded(reply)
    }

    private func topicName(_ text: String) throws -> TopicName {
        guard !text.isEmpty else { throw FCMError.invalidArgument("topic name is required", field: "topic") }
        do {
            return try TopicName(text, field: "topic")
        } catch {
            throw FCMError.invalidArgument(error)
        }
    }

    /// Takes the change from the device's budget (a client caller), appends `operation`, and throws the FCM error
    /// for a rejection: 404 for a registration that is not registered, 400 naming `pushToken` for one that is not
    /// `ios`.
    private func change(
        _ operation: LedgerOperation, _ context: RegistrationRequestContext, _ request: Request
    ) async throws {
        let receipt = try await server.appendDeviceChange(operation, context, request)
        if let rejection = receipt.outcomes[0].rejection {
            if rejection.code.kind == .wrongPlatform {
                throw FCMError.invalidArgument("\(rejection.message).", field: "pushToken")
            }
            throw TopicSubscriptionRoutes.error(for: rejection, to: context.caller.role)
        }
    }
}

/// The Live Activity a registration follows after `PUT …/liveActivities/{topic}`.
struct LiveActivityFollowReply: Encodable {
    let topic: String
    let pushToken: String
}

/// `GET …/registrations/{token}/liveActivities`.
struct LiveActivitiesReply: Encodable {
    let liveActivities: [LiveActivityFollowReply]
    let pushToStartTokens: [PushToStartTokenReply]
}

/// The push-to-start token a registration holds after `PUT …/pushToStartTokens/{attributesType}`.
struct PushToStartTokenReply: Encodable {
    let attributesType: String
    let pushToken: String
}
