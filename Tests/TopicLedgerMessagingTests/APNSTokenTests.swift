import Foundation
import LedgerTestSupport
import Testing

@testable import TopicLedgerMessaging
import HTTPTypes

/// The app's APNs token through the library: sent, persisted and retried like topic operations, sent again after
/// a new registration, cleared; and a message that arrives both by stream and through APNs handed over once.
@Suite("TopicLedgerMessaging: the APNs token", .timeLimit(.minutes(2)))
struct APNSTokenTests {
    static let deviceToken = Data((0..<32).map { UInt8($0) })
    static let hex = (0..<32).map { String(format: "%02x", $0) }.joined()

    /// The APNs tokens the instance audit lists for `token`: (hex, sandbox, still held).
    static func apnsTokens(_ admin: LibraryServer.Admin, of token: String) async throws -> [(String, Bool, Bool)] {
        let reply = try await admin.call(.get, "/v1/projects/demo-project/audit/instances/\(token)")
        let held = reply.json["apnsTokens"] as? [[String: Any]] ?? []
        return held.map {
            ($0["apnsToken"] as? String ?? "", $0["sandbox"] as? Bool ?? false, $0["untilSeq"] == nil)
        }
    }

    @Test("setAPNSToken(.sandbox) reaches the server, a 503 on the way is retried, and apnsToken = nil clears it")
    func setRetriedAndCleared() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            let messaging = try Messaging(configuration: server.messagingConfiguration(port: admin.port))
            let token = try await messaging.token()
            server.front.on(.put, "/apnsToken", .status(503))
            messaging.setAPNSToken(Self.deviceToken, type: .sandbox)
            #expect(messaging.apnsToken == Self.deviceToken)
            #expect(
                try await eventually {
                    try await Self.apnsTokens(admin, of: token).map(\.0) == [Self.hex]
                })
            #expect(try await Self.apnsTokens(admin, of: token).first?.1 == true)
            #expect(server.front.requests(.put, "/apnsToken").count >= 2)
            messaging.apnsToken = nil
            #expect(messaging.apnsToken == nil)
            #expect(try await eventually { try await Self.apnsTokens(admin, of: token).first?.2 == false })
            messaging.close()
        }
    }

    @Test("a token set before the app closed is sent by the next launch; a new registration token gets it again")
    func persistedAndResentAfterNewRegistration() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            let configuration = server.messagingConfiguration(port: admin.port)
            let first = try Messaging(configuration: configuration)
            let old = try await first.token()
            // Every PUT fails while the first instance runs; it closes with the token still to send.
            server.front.on(.put, "/apnsToken", times: 1000, .status(503))
            first.setAPNSToken(Self.deviceToken, type: .prod)
            #expect(try await eventually { server.front.requests(.put, "/apnsToken").count >= 1 })
            first.close()
            server.front.clearRules()
            let second = try Messaging(configuration: configuration)
            #expect(second.apnsToken == Self.deviceToken)
            #expect(try await eventually { try await Self.apnsTokens(admin, of: old).map(\.0) == [Self.hex] })
            // The server forgets the registration: the library registers anew and sends the APNs token with it.
            _ = try await admin.call(.delete, "/v1/projects/demo-project/registrations/\(old)")
            try await second.subscribe(toTopic: "news")
            let new = try #require(second.registrationToken)
            #expect(new != old)
            #expect(try await eventually { try await Self.apnsTokens(admin, of: new).map(\.0) == [Self.hex] })
            second.close()
        }
    }

    @Test(
        "a message the stream delivered is not handed over again by APNs, and one APNs handed over is skipped by the stream"
    )
    func deliveredOnce() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            let messaging = try Messaging(configuration: server.messagingConfiguration(port: admin.port))
            try await messaging.subscribe(toTopic: "news")
            let token = try #require(messaging.registrationToken)
            let first = try await admin.send(#"{"topic":"news","data":{"n":"1"}}"#)
            let second = try await admin.send(#"{"topic":"news","data":{"n":"2"}}"#)
            // The second arrives through APNs first: the app handles it there.
            #expect(messaging.appDidReceiveMessage(["gcm.message_id": second, "aps": ["alert": "2"]]))
            #expect(!messaging.appDidReceiveMessage(["gcm.message_id": second]))
            var iterator = messaging.messages().makeAsyncIterator()
            #expect(try await iterator.next()?.messageID == first)
            let third = try await admin.send(#"{"topic":"news","data":{"n":"3"}}"#)
            // The stream skips the second and goes on with the third.
            #expect(try await iterator.next()?.messageID == third)
            // The first reached the app by stream: its APNs copy is not handed over again.
            #expect(!messaging.appDidReceiveMessage(["gcm.message_id": first]))
            // Skipped is not lost for the cursor: asking for the next acknowledges through the third.
            let waiting = Task { [iterator] in
                var iterator = iterator
                return try await iterator.next()
            }
            #expect(try await eventually { try await admin.undelivered(token) == [] })
            waiting.cancel()
            _ = try? await waiting.value
            messaging.close()
        }
    }
}
