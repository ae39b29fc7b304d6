import Foundation
import Hummingbird
import LedgerCore
import LedgerStore
import FCMWire

/// Device registration (SPEC §4.4): the `didReceiveRegistrationToken` moment, and unregistration.
struct RegistrationRoutes {
    let server: ServerContext

    func register(on router: TokenPathRouter) {
        router.group("/v1/projects/:project/registrations")
            .projectRoutes(server, roles: [.client])
            .group(context: ProjectRequestContext.self)
            .post { request, context in
                let caller = context.caller
                let project = caller.project
                let body = try await JSONBody.decode(
                    RegistrationBody.self, request, limit: server.configuration.maximumBodyBytes)
                try server.take(
                    server.registrationRate, for: project,
                    "Registrations for this project are over their rate; retry later")
                let token = RegistrationToken.issue()
                var operations: [LedgerOperation] = [.register(token, platform: body.platform, appID: body.appID)]
                if let apnsToken = body.apnsToken { operations.append(.setAPNsToken(token, apnsToken)) }
                let receipt = try await server.append(
                    WriteRequest(actor: caller.actor, requestID: request.ledgerRequestID, operations: operations),
                    to: context.ledger)
                if receipt.outcomes.contains(where: { $0.rejection != nil }) {
                    throw FCMError.unavailable("A fresh token collided with a registered one; try again.")
                }
                server.ledgers.activity.note(token, in: project)
                return try JSONResponse.encoded(IssuedToken(token: token.rawValue))
            }
        router.group("/v1/projects/:project/registrations/:token")
            .projectRoutes(server, roles: [.client, .admin])
            .add(middleware: RegistrationInPath(activity: server.ledgers.activity))
            .group(context: RegistrationRequestContext.self)
            .delete { request, context in
                let caller = context.caller
                let project = caller.project
                let token = context.token
                let receipt = try await server.append(
                    WriteRequest(
                        actor: caller.actor, requestID: request.ledgerRequestID,
                        operations: [
                            .unregister(
                                token,
                                reason: caller.role == .client ? "deleted by the device" : "deleted by the server")
                        ]),
                    to: context.ledger)
                if let rejection = receipt.outcomes[0].rejection {
                    throw TopicSubscriptionRoutes.error(for: rejection, to: caller.role)
                }
                // The device's open stream or long poll ends now, not at its next keep-alive.
                if let instance = try context.ledger.read({ try $0.instanceID(of: token) }) {
                    server.ledgers.delivery(for: project).notifier.wake(instance)
                }
                return try JSONResponse.encoded(EmptyBody())
            }
        let apns = router.group("/v1/projects/:project/registrations/:token/apnsToken")
            .projectRoutes(server, roles: [.client, .admin])
            .add(middleware: RegistrationInPath(activity: server.ledgers.activity))
            .group(context: RegistrationRequestContext.self)
        apns.put { request, context in
            let body = try await JSONBody.decode(
                APNsTokenBody.self, request, limit: server.configuration.maximumBodyBytes)
            let token = context.token
            try await changeAPNsToken(.setAPNsToken(token, body.apnsToken), context, request)
            return try JSONResponse.encoded(
                APNsTokenReply(apnsToken: body.apnsToken.hex, apnsSandbox: body.apnsToken.sandbox))
        }
        apns.delete { request, context in
            let caller = context.caller
            let token = context.token
            try await changeAPNsToken(
                .clearAPNsToken(
                    token, reason: caller.role == .client ? "deleted by the device" : "deleted by the server"),
                context, request)
            return try JSONResponse.encoded(EmptyBody())
        }
    }

    /// Appends a change of a registration's APNs token: 404 for a registration that is not registered, 400 for
    /// one that is not `ios`; setting the token it holds, or clearing none, changes nothing and answers 200.
    /// Every change is an event, so a device's own changes count against its budget of changes (as its
    /// subscriptions do): the client key that makes them ships in every app.
    private func changeAPNsToken(
        _ operation: LedgerOperation, _ context: RegistrationRequestContext, _ request: Request
    ) async throws {
        let receipt = try await server.appendDeviceChange(operation, context, request)
        if let rejection = receipt.outcomes[0].rejection {
            throw TopicSubscriptionRoutes.error(for: rejection, to: context.caller.role)
        }
    }

}

/// The APNs token a registration holds after `PUT …/apnsToken`.
struct APNsTokenReply: Encodable {
    let apnsToken: String
    let apnsSandbox: Bool
}

extension RegistrationToken {
    /// A new registration token: 16 random bytes and 96 more, base64url, shaped like an FCM token
    /// (`<instance>:APA91b<secret>`). Holding it is what makes a device itself.
    ///
    /// As in a Firebase installation id, the first byte's high four bits are `0111`, so the token
    /// starts with `c`–`f`: never with `-`, which command-line tools would take for an option.
    public static func issue() -> RegistrationToken {
        // 112 random bytes from 14 draws of the system generator (not one per byte: each draw is a getrandom
        // call), encoded as base64url by hand — Foundation has no base64url, and its base64 plus three string
        // replacements cost a registration a quarter of its server time (perf, tools/bench/cluster.py).
        var generator = SystemRandomNumberGenerator()
        var bytes: [UInt8] = []
        bytes.reserveCapacity(112)
        for _ in 0..<14 { withUnsafeBytes(of: generator.next() as UInt64) { bytes.append(contentsOf: $0) } }
        bytes[0] = 0b0111_0000 | (bytes[0] & 0b0000_1111)
        var token: [UInt8] = []
        token.reserveCapacity(160)
        Self.appendBase64URL(bytes[..<16], to: &token)
        token.append(contentsOf: ":APA91b".utf8)
        Self.appendBase64URL(bytes[16...], to: &token)
        // The alphabet is [A-Za-z0-9_-] plus ':', which RegistrationToken accepts.
        return try! Self(String(decoding: token, as: UTF8.self))
    }

    private static let base64URL = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// RFC 4648 §5 (base64url), without padding.
    static func appendBase64URL(_ bytes: ArraySlice<UInt8>, to output: inout [UInt8]) {
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let count = min(3, bytes.endIndex - index)
            var group = UInt32(bytes[index]) << 16
            if count > 1 { group |= UInt32(bytes[index + 1]) << 8 }
            if count > 2 { group |= UInt32(bytes[index + 2]) }
            for position in 0...count {
                output.append(base64URL[Int((group >> UInt32(18 - 6 * position)) & 0x3F)])
            }
            index += count
        }
    }
}
