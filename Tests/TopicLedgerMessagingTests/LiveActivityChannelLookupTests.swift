import Foundation
import HTTPTypes
import LedgerTestSupport
import Testing

@testable import TopicLedgerMessaging

/// An app finding the iOS 18 broadcast channel of a topic through the library: asked under the device's own
/// registration, `nil` for a topic without one, re-registered when the server no longer knows the token.
@Suite("TopicLedgerMessaging: a topic's Live Activity broadcast channel", .timeLimit(.minutes(2)))
struct LiveActivityChannelLookupTests {
    static let channel =
        #"{"channelId":"dGVzdGNoYW5uZWwxMjM0NQ==","createSeq":"4","createTime":"2026-12-06T16:00:00.000000Z","messageStoragePolicy":0,"name":"projects/demo-project/topics/match-42/liveActivityChannel","topic":"match-42"}"#

    @Test("a topic without a channel is nil (the server's 404 CHANNEL_NOT_FOUND), one with a channel gives its id")
    func lookUp() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            let messaging = try Messaging(configuration: server.messagingConfiguration(port: admin.port))
            // The real server: the device is registered first, and the topic has no channel.
            #expect(try await messaging.liveActivityChannel(forTopic: "/topics/match-42") == nil)
            let token = try #require(messaging.registrationToken)
            let asked = server.front.requests(.get, "/liveActivityChannels/match-42")
            #expect(asked.count == 1)
            #expect(
                asked.first?.path == "/v1/projects/demo-project/registrations/\(token)/liveActivityChannels/match-42")
            #expect(asked.first?.headers[HTTPField.Name("x-goog-api-key")!] == "dev-client-key")
            // A channel, as the server answers it (the stand-in's Apple is not in this test).
            server.front.on(.get, "/liveActivityChannels/match-42", .status(200, body: Self.channel))
            #expect(try await messaging.liveActivityChannel(forTopic: "match-42") == "dGVzdGNoYW5uZWwxMjM0NQ==")
            messaging.close()
        }
    }

    @Test(
        "only the server's CHANNEL_NOT_FOUND is no channel: any other 404 (an unknown route, a bare 404) is an error")
    func otherNotFound() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            let messaging = try Messaging(configuration: server.messagingConfiguration(port: admin.port))
            _ = try await messaging.token()
            server.front.on(
                .get, "/liveActivityChannels/",
                .status(
                    404,
                    body:
                        #"{"error":{"code":404,"message":"Unknown route.","status":"NOT_FOUND","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"NOT_FOUND"}]}}"#
                ))
            let token = try #require(messaging.registrationToken)
            await #expect(throws: MessagingError.self) {
                try await messaging.liveActivityChannel(forTopic: "match-42")
            }
            // Not taken for an unknown token either: the registration is kept, and asked once.
            #expect(messaging.registrationToken == token)
            #expect(server.front.requests(.get, "/liveActivityChannels/").count == 1)
            server.front.on(.get, "/liveActivityChannels/", .status(404))
            await #expect(throws: MessagingError.self) {
                try await messaging.liveActivityChannel(forTopic: "match-42")
            }
            server.front.on(
                .get, "/liveActivityChannels/",
                .status(
                    404,
                    body:
                        #"{"error":{"code":404,"message":"none","status":"NOT_FOUND","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"CHANNEL_NOT_FOUND"}]}}"#
                ))
            #expect(try await messaging.liveActivityChannel(forTopic: "match-42") == nil)
            messaging.close()
        }
    }

    @Test("a bad topic name is refused before any request; a 503 is the caller's error")
    func refusals() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            let messaging = try Messaging(configuration: server.messagingConfiguration(port: admin.port))
            await #expect(throws: MessagingError.invalidTopicName("bad topic")) {
                try await messaging.liveActivityChannel(forTopic: "bad topic")
            }
            #expect(server.front.requests(.get, "/liveActivityChannels/").isEmpty)
            server.front.on(.get, "/liveActivityChannels/", .status(503))
            await #expect(throws: MessagingError.self) {
                try await messaging.liveActivityChannel(forTopic: "match-42")
            }
            messaging.close()
        }
    }

    @Test("a token the server no longer knows (404 UNREGISTERED) is replaced, and the channel asked for again")
    func reRegisters() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            let messaging = try Messaging(configuration: server.messagingConfiguration(port: admin.port))
            let first = try await messaging.token()
            server.front.on(
                .get, "/liveActivityChannels/",
                .status(
                    404,
                    body:
                        #"{"error":{"code":404,"message":"gone","status":"NOT_FOUND","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"UNREGISTERED"}]}}"#
                ))
            #expect(try await messaging.liveActivityChannel(forTopic: "match-42") == nil)
            let second = try #require(messaging.registrationToken)
            #expect(second != first)
            let paths = server.front.requests(.get, "/liveActivityChannels/").map(\.path)
            #expect(paths.count == 2)
            #expect(paths.last?.contains(second) == true)
            messaging.close()
        }
    }
}
