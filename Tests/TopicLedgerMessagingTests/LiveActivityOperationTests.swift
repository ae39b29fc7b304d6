import Foundation
import LedgerTestSupport
import Testing

@testable import TopicLedgerMessaging
import LedgerStore
import LedgerServer
import HTTPTypes

@Suite(
    "TopicLedgerMessaging: Live Activity follows and push-to-start tokens against the real server",
    .timeLimit(.minutes(2)))
struct LiveActivityOperationTests {
    static let activity = Data((0..<32).map { UInt8($0) })
    static let newer = Data((0..<32).map { UInt8(0x80 + $0) })
    static let start = Data((0..<40).map { UInt8(0x40 + $0) })
    static func hex(_ data: Data) -> String { data.map { String(format: "%02x", $0) }.joined() }

    /// What the server holds for `token`: topic → push token, and attributes type → push-to-start token.
    func held(_ admin: LibraryServer.Admin, _ token: String) async throws -> ([String: String], [String: String])? {
        let reply = try await admin.call(.get, "/v1/projects/demo-project/registrations/\(token)/liveActivities")
        guard reply.status == .ok else { return nil }
        func pairs(_ key: String, _ name: String) -> [String: String] {
            Dictionary(
                uniqueKeysWithValues: (reply.json[key] as? [[String: Any]] ?? []).compactMap { entry in
                    (entry[name] as? String).flatMap { name in (entry["pushToken"] as? String).map { (name, $0) } }
                })
        }
        return (pairs("liveActivities", "topic"), pairs("pushToStartTokens", "attributesType"))
    }

    @Test("follow, replace, unfollow and a push-to-start token reach the server; the wanted state is kept")
    func followAndUnfollow() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            let messaging = try Messaging(configuration: server.messagingConfiguration(port: admin.port))
            try await messaging.followLiveActivity(topic: "/topics/match-42", pushToken: Self.activity)
            try await messaging.setPushToStartToken(Self.start, attributesType: "MatchAttributes")
            let token = try #require(messaging.registrationToken)
            var state = try #require(try await held(admin, token))
            #expect(state.0 == ["match-42": Self.hex(Self.activity)])
            #expect(state.1 == ["MatchAttributes": Self.hex(Self.start)])
            try await messaging.followLiveActivity(topic: "match-42", pushToken: Self.newer)
            #expect(messaging.liveActivities == ["match-42": Self.hex(Self.newer)])
            state = try #require(try await held(admin, token))
            #expect(state.0 == ["match-42": Self.hex(Self.newer)])
            try await messaging.unfollowLiveActivity(topic: "match-42")
            // Unfollowing what it does not follow is done, not an error.
            try await messaging.unfollowLiveActivity(topic: "never")
            state = try #require(try await held(admin, token))
            #expect(state.0 == [:])
            #expect(messaging.liveActivities == [:])
            #expect(messaging.pendingTopicOperations.isEmpty)
        }
    }

    @Test("bad topics, tokens and types are refused at once, before anything is stored or sent")
    func validation() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            let messaging = try Messaging(
                configuration: server.messagingConfiguration(autoInit: false, port: admin.port))
            await #expect(throws: MessagingError.invalidTopicName("a b")) {
                try await messaging.followLiveActivity(topic: "a b", pushToken: Self.activity)
            }
            await #expect(throws: MessagingError.self) {
                try await messaging.followLiveActivity(topic: "match", pushToken: Data(count: 15))
            }
            await #expect(throws: MessagingError.self) {
                try await messaging.setPushToStartToken(Self.start, attributesType: "Match Attributes")
            }
            await #expect(throws: MessagingError.self) {
                try await messaging.setPushToStartToken(Data(count: 201), attributesType: "MatchAttributes")
            }
            #expect(messaging.pendingTopicOperations.isEmpty)
            #expect(server.front.requests(.post, "/registrations").isEmpty)
        }
    }

    @Test("a follow the server answers with 503 is retried; a pending one survives a restart and is sent then")
    func retriedAndPersisted() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            server.front.on(.put, "/liveActivities/", times: 2, .status(503))
            let messaging = try Messaging(configuration: server.messagingConfiguration(port: admin.port))
            try await messaging.followLiveActivity(topic: "scores", pushToken: Self.activity)
            #expect(server.front.requests(.put, "/liveActivities/scores").count == 3)
            let token = try #require(messaging.registrationToken)
            #expect(try await held(admin, token)?.0 == ["scores": Self.hex(Self.activity)])

            // Queued while the server is away, then the app is closed: the next instance sends it.
            server.front.on(.put, "/pushToStartTokens/", times: 1_000, .status(503))
            let pending = Task { try await messaging.setPushToStartToken(Self.start, attributesType: "Score") }
            #expect(await eventually { server.front.requests(.put, "/pushToStartTokens/").count >= 1 })
            messaging.close()
            await #expect(throws: MessagingError.closed) { try await pending.value }
            server.front.clearRules()
            // The old instance sent nothing since it was closed: what reaches the server now is the next one's.
            let next = try Messaging(configuration: server.messagingConfiguration(port: admin.port))
            #expect(try await eventually { try await held(admin, token)?.1 == ["Score": Self.hex(Self.start)] })
            #expect(await eventually { next.pendingTopicOperations.isEmpty })
            next.close()
        }
    }

    @Test("after the server forgets the token, the new registration follows the same Live Activities again")
    func newTokenReappliesFollows() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            let messaging = try Messaging(configuration: server.messagingConfiguration(port: admin.port))
            try await messaging.followLiveActivity(topic: "scores", pushToken: Self.activity)
            try await messaging.setPushToStartToken(Self.start, attributesType: "MatchAttributes")
            let old = try #require(messaging.registrationToken)
            #expect(try await admin.call(.delete, "/v1/projects/demo-project/registrations/\(old)").status == .ok)
            try await messaging.subscribe(toTopic: "scores")
            let new = try #require(messaging.registrationToken)
            #expect(new != old)
            #expect(await eventually { messaging.pendingTopicOperations.isEmpty })
            let state = try #require(try await held(admin, new))
            #expect(state.0 == ["scores": Self.hex(Self.activity)])
            #expect(state.1 == ["MatchAttributes": Self.hex(Self.start)])
        }
    }
}
