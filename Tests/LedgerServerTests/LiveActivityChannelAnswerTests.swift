import APNsWire
import Foundation
import HTTPTypes
import LedgerCore
import LedgerStore
import LedgerTestSupport
import Logging
import Synchronization
import Testing

@testable import LedgerServer

/// The broadcast channel routes against Apple's answers, given by a stand-in for the channel client: only Apple's
/// 404 `ChannelNotRegistered` is a channel gone; a deletion Apple made that the ledger could not record says so; a
/// creation answered without a usable id is deleted again or reported; Apple's strings are bounded.
@Suite("Live Activity broadcast channel routes: Apple's answers", .timeLimit(.minutes(2)))
struct LiveActivityChannelAnswerTests {
    static let base = LiveActivityChannelRouteTests.base
    static let create = LiveActivityChannelRouteTests.create
    static let channel = LiveActivityChannelRouteTests.channel

    /// Answers as Apple would, and keeps what it was asked.
    final class StandIn: APNsChannelManagement {
        let created: APNsChannelClient.Answer
        let deleted: APNsChannelClient.Answer
        /// Run when a deletion is asked, before it is answered.
        let onDelete: @Sendable () -> Void
        let deletions = Mutex<[String]>([])

        init(
            created: APNsChannelClient.Answer = APNsChannelClient.Answer(status: 500),
            deleted: APNsChannelClient.Answer, onDelete: @escaping @Sendable () -> Void = {}
        ) {
            self.created = created
            self.deleted = deleted
            self.onDelete = onDelete
        }

        func createChannel(messageStoragePolicy: Int) async throws -> APNsChannelClient.Answer { created }
        func deleteChannel(_ channelID: String) async throws -> APNsChannelClient.Answer {
            deletions.withLock { $0.append(channelID) }
            onDelete()
            return deleted
        }
    }

    static func server(logs: DeferredMetadataLogHandlerTests.Lines? = nil) -> TestServer {
        var server = try! LiveActivityChannelRouteTests.broadcasting()
        if let logs {
            var logger = Logger(label: "ledger") {
                StreamLogHandler(label: $0, stream: DeferredMetadataLogHandlerTests.Lines.Stream(lines: logs))
            }
            logger.logLevel = .info
            server.logger = logger
        }
        return server
    }

    static let requestID = "3F1C2D4E-5A6B-4C7D-8E9F-0A1B2C3D4E5F"

    @Test(
        "a DELETE answered 404 with another reason, or none, is a refusal: nothing recorded, the channel kept",
        arguments: [
            APNsChannelClient.Answer(status: 404, reason: "NotFound"),
            APNsChannelClient.Answer(status: 404),
            APNsChannelClient.Answer(status: 404, reason: "BadPath"),
        ])
    func otherNotFoundIsRefused(answer: APNsChannelClient.Answer) async throws {
        try await Self.server().run { client in
            try await LiveActivityChannelRouteTests.record(["scores"], in: client.ledgers)
            let standIn = StandIn(deleted: answer)
            client.ledgers.apnsProviders.useChannelManagement(standIn, for: .default)
            let before = try await client.headSeq()
            let reply = try await client.call(.delete, Self.channel)
            #expect(reply.status == .badRequest && reply.googleStatus == "FAILED_PRECONDITION", "\(reply.text)")
            #expect(standIn.deletions.withLock { $0 } == ["Y2hhbm5lbC00AAAAAA=="])
            #expect(try await client.headSeq() == before)
            #expect(try await client.call(.get, Self.channel).status == .ok)
            let metrics = try await client.call(.get, "/metrics")
            #expect(
                metrics.text.contains(#"ledger_apns_channel_requests_total{operation="delete",outcome="refused"} 1"#),
                "\(metrics.text)")
        }
    }

    @Test("a DELETE answered 404 ChannelNotRegistered records the channel gone, with that reason")
    func channelNotRegisteredIsGone() async throws {
        try await Self.server().run { client in
            try await LiveActivityChannelRouteTests.record(["scores"], in: client.ledgers)
            client.ledgers.apnsProviders.useChannelManagement(
                StandIn(deleted: APNsChannelClient.Answer(status: 404, reason: "ChannelNotRegistered")), for: .default)
            let reply = try await client.call(.delete, Self.channel)
            #expect(reply.status == .ok, "\(reply.text)")
            #expect(try await client.call(.get, Self.channel).status == .notFound)
            let ledger = try await client.ledgers.ledger(for: .default)
            let head = try ledger.readLog { try $0.head().seq }
            let event = try #require(try ledger.read { try $0.event(at: head) })
            guard case .liveActivityChannelDeleted(let change) = event.body else {
                Issue.record("not a deletion: \(event.body)")
                return
            }
            #expect(change.reason == "APNs: ChannelNotRegistered")
        }
    }

    @Test("a DELETE Apple made that the ledger could not record: an error saying so, counted, one log line")
    func deletedButNotRecorded() async throws {
        let logs = DeferredMetadataLogHandlerTests.Lines()
        try await Self.server(logs: logs).run { client in
            try await LiveActivityChannelRouteTests.record(["scores"], in: client.ledgers)
            let ledger = try await client.ledgers.ledger(for: .default)
            // The ledger stops taking writes while Apple deletes the channel.
            client.ledgers.apnsProviders.useChannelManagement(
                StandIn(
                    deleted: APNsChannelClient.Answer(status: 204, requestID: Self.requestID),
                    onDelete: { ledger.close() }),
                for: .default)
            let reply = try await client.call(.delete, Self.channel)
            #expect(reply.status == .serviceUnavailable, "\(reply.text)")
            #expect(reply.text.contains("deleted at APNs, not recorded"), "\(reply.text)")
            #expect(reply.text.contains("retry DELETE"), "\(reply.text)")
            let metrics = try await client.call(.get, "/metrics")
            #expect(
                metrics.text.contains(#"ledger_apns_channel_requests_total{operation="delete",outcome="failed"} 1"#),
                "\(metrics.text)")
            let line = logs.withoutTimestamps.first { $0.contains("could not be recorded") }
            #expect(line?.hasPrefix("error") == true, "\(logs.withoutTimestamps)")
            #expect(line?.contains("Y2hhbm5lbC00AAAAAA==") == true && line?.contains("scores") == true)
            #expect(line?.contains("Bearer") == false)
        }
    }

    @Test("a creation answered 2xx with an id that is not one: deleted at Apple again, logged, nothing recorded")
    func unusableIDDeletedAgain() async throws {
        let logs = DeferredMetadataLogHandlerTests.Lines()
        try await Self.server(logs: logs).run { client in
            let standIn = StandIn(
                created: APNsChannelClient.Answer(status: 201, channelID: "not_base64!"),
                deleted: APNsChannelClient.Answer(status: 204))
            client.ledgers.apnsProviders.useChannelManagement(standIn, for: .default)
            let before = try await client.headSeq()
            let reply = try await client.call(.post, Self.create, body: #"{"messageStoragePolicy":0}"#)
            #expect(reply.status == .badGateway, "\(reply.text)")
            #expect(standIn.deletions.withLock { $0 } == ["not_base64!"])
            #expect(try await client.headSeq() == before)
            #expect(
                logs.withoutTimestamps.contains { $0.contains("deleted at APNs a broadcast channel") },
                "\(logs.withoutTimestamps)")
        }
    }

    @Test("a creation answered 2xx without an id: nothing to delete, the log says to compare with Apple's list")
    func missingIDReported() async throws {
        let logs = DeferredMetadataLogHandlerTests.Lines()
        try await Self.server(logs: logs).run { client in
            let standIn = StandIn(
                created: APNsChannelClient.Answer(status: 201, requestID: Self.requestID),
                deleted: APNsChannelClient.Answer(status: 204))
            client.ledgers.apnsProviders.useChannelManagement(standIn, for: .default)
            let before = try await client.headSeq()
            let reply = try await client.call(.post, Self.create, body: #"{"messageStoragePolicy":0}"#)
            #expect(reply.status == .badGateway, "\(reply.text)")
            #expect(standIn.deletions.withLock { $0 }.isEmpty)
            #expect(try await client.headSeq() == before)
            #expect(
                logs.withoutTimestamps.contains {
                    $0.hasPrefix("error") && $0.contains("APNs may have created a channel; compare with its all-channels list")
                }, "\(logs.withoutTimestamps)")
        }
    }

    /// A server whose demo project has APNs credentials but `apns.broadcast` off (turned off after its channels were
    /// made).
    static func notBroadcasting() -> TestServer {
        TestServer { configuration in
            configuration.apns[.default] = try? APNsSettings(
                section: [
                    "teamId": "ABCDE12345", "keyId": "KEY1234567", "keyFile": "/nowhere/AuthKey.p8",
                    "topic": "com.example.app",
                ],
                broadcast: false, field: "test")
        }
    }

    @Test("with apns.broadcast turned off, a topic's channel is still read and deleted at Apple; none is created")
    func broadcastTurnedOff() async throws {
        try await Self.notBroadcasting().run { client in
            try await LiveActivityChannelRouteTests.record(["scores"], in: client.ledgers)
            let standIn = StandIn(
                created: APNsChannelClient.Answer(status: 201, channelID: "bmV3AAAAAA=="),
                deleted: APNsChannelClient.Answer(status: 204, requestID: Self.requestID))
            client.ledgers.apnsProviders.useChannelManagement(standIn, for: .default)
            #expect(try await client.call(.get, Self.channel, headers: TestServer.Client.auditor).status == .ok)
            let listed = try await client.call(.get, Self.base + "/liveActivityChannels")
            #expect((listed.json["liveActivityChannels"] as? [Any])?.count == 1, "\(listed.text)")
            // A new channel is refused before Apple is asked.
            let before = try await client.headSeq()
            let created = try await client.call(
                .post, Self.base + "/topics/weather:createLiveActivityChannel", body: #"{"messageStoragePolicy":0}"#)
            #expect(created.status == .badRequest && created.googleStatus == "FAILED_PRECONDITION", "\(created.text)")
            #expect(try await client.headSeq() == before)
            // The existing one is deleted at Apple and recorded.
            let deleted = try await client.call(.delete, Self.channel)
            #expect(deleted.status == .ok, "\(deleted.text)")
            #expect(standIn.deletions.withLock { $0 } == ["Y2hhbm5lbC00AAAAAA=="])
            #expect(try await client.call(.get, Self.channel).errorCode == "CHANNEL_NOT_FOUND")
            let ledger = try await client.ledgers.ledger(for: .default)
            let head = try ledger.readLog { try $0.head().seq }
            let event = try #require(try ledger.read { try $0.event(at: head) })
            guard case .liveActivityChannelDeleted(let change) = event.body else {
                Issue.record("not a deletion: \(event.body)")
                return
            }
            #expect(change.reason == "deleted" && change.apnsRequestID == Self.requestID)
            // Nothing left to delete: 404, not a refusal for the project's settings.
            #expect(try await client.call(.delete, Self.channel).errorCode == "CHANNEL_NOT_FOUND")
        }
    }

    @Test("a project without APNs credentials cannot delete at Apple: 400 FAILED_PRECONDITION naming apns")
    func noCredentials() async throws {
        try await TestServer().run { client in
            try await LiveActivityChannelRouteTests.record(["scores"], in: client.ledgers)
            let before = try await client.headSeq()
            let reply = try await client.call(.delete, Self.channel)
            #expect(reply.status == .badRequest && reply.googleStatus == "FAILED_PRECONDITION", "\(reply.text)")
            #expect(reply.text.contains("apns"), "\(reply.text)")
            #expect(try await client.headSeq() == before)
            #expect(try await client.call(.get, Self.channel).status == .ok)
        }
    }

    /// Creates as Apple would, running `onCreate` before it answers; deletes with 204.
    final class CreatingStandIn: APNsChannelManagement {
        let onCreate: @Sendable () -> Void
        let deletions = Mutex<[String]>([])

        init(onCreate: @escaping @Sendable () -> Void) {
            self.onCreate = onCreate
        }

        func createChannel(messageStoragePolicy: Int) async throws -> APNsChannelClient.Answer {
            onCreate()
            return APNsChannelClient.Answer(status: 201, requestID: LiveActivityChannelAnswerTests.requestID,
                channelID: "bGVha2VkAAAAAA==")
        }

        func deleteChannel(_ channelID: String) async throws -> APNsChannelClient.Answer {
            deletions.withLock { $0.append(channelID) }
            return APNsChannelClient.Answer(status: 204)
        }
    }

    @Test("a channel Apple created that the ledger cannot record is deleted at Apple again, and counted failed")
    func unrecordedCreationDeletedAgain() async throws {
        let logs = DeferredMetadataLogHandlerTests.Lines()
        try await Self.server(logs: logs).run { client in
            let ledger = try await client.ledgers.ledger(for: .default)
            // The ledger stops taking writes while Apple creates the channel.
            let standIn = CreatingStandIn(onCreate: { ledger.close() })
            client.ledgers.apnsProviders.useChannelManagement(standIn, for: .default)
            let reply = try await client.call(.post, Self.create, body: #"{"messageStoragePolicy":1}"#)
            #expect(reply.status == .serviceUnavailable, "\(reply.text)")
            #expect(standIn.deletions.withLock { $0 } == ["bGVha2VkAAAAAA=="])
            let metrics = try await client.call(.get, "/metrics")
            #expect(
                metrics.text.contains(#"ledger_apns_channel_requests_total{operation="create",outcome="failed"} 1"#),
                "\(metrics.text)")
            let line = logs.withoutTimestamps.first { $0.contains("deleted at APNs a broadcast channel") }
            #expect(
                line?.contains("bGVha2VkAAAAAA==") == true && line?.contains("scores") == true,
                "\(logs.withoutTimestamps)")
        }
    }

    /// Throws as the channel client does when no answer came, for a creation.
    final class SilentStandIn: APNsChannelManagement {
        let mayHaveArrived: Bool
        let deletions = Mutex<[String]>([])

        init(mayHaveArrived: Bool) {
            self.mayHaveArrived = mayHaveArrived
        }

        func createChannel(messageStoragePolicy: Int) async throws -> APNsChannelClient.Answer {
            throw APNsChannelClient.NoAnswer(description: "no answer in time", mayHaveArrived: mayHaveArrived)
        }

        func deleteChannel(_ channelID: String) async throws -> APNsChannelClient.Answer {
            deletions.withLock { $0.append(channelID) }
            return APNsChannelClient.Answer(status: 204)
        }
    }

    @Test("a creation that reached Apple and got no answer: 503 saying the outcome is unknown, counted, one error line")
    func unknownOutcome() async throws {
        let logs = DeferredMetadataLogHandlerTests.Lines()
        try await Self.server(logs: logs).run { client in
            let standIn = SilentStandIn(mayHaveArrived: true)
            client.ledgers.apnsProviders.useChannelManagement(standIn, for: .default)
            let before = try await client.headSeq()
            let reply = try await client.call(.post, Self.create, body: #"{"messageStoragePolicy":1}"#)
            #expect(reply.status == .serviceUnavailable && reply.googleStatus == "UNAVAILABLE", "\(reply.text)")
            #expect(reply.text.contains("outcome is unknown"), "\(reply.text)")
            #expect(try await client.headSeq() == before)
            #expect(standIn.deletions.withLock { $0 }.isEmpty)
            let metrics = try await client.call(.get, "/metrics")
            #expect(
                metrics.text.contains(#"ledger_apns_channel_requests_total{operation="create",outcome="unknown"} 1"#),
                "\(metrics.text)")
            #expect(
                metrics.text.contains(#"ledger_apns_channel_requests_total{operation="create",outcome="failed"} 0"#),
                "\(metrics.text)")
            let lines = logs.withoutTimestamps.filter {
                $0.contains("may have created a channel the ledger does not know")
            }
            #expect(lines.count == 1, "\(logs.withoutTimestamps)")
            let line = lines.first ?? ""
            #expect(line.hasPrefix("error") && line.contains("scores") && line.contains("all-channels"), "\(line)")
            #expect(!line.contains("Bearer") && !line.contains("bearer"))
        }
    }

    @Test("a creation that never reached Apple (no connection): 503, counted failed, not unknown")
    func noConnection() async throws {
        try await Self.server().run { client in
            client.ledgers.apnsProviders.useChannelManagement(SilentStandIn(mayHaveArrived: false), for: .default)
            let reply = try await client.call(.post, Self.create, body: #"{"messageStoragePolicy":1}"#)
            #expect(reply.status == .serviceUnavailable, "\(reply.text)")
            #expect(!reply.text.contains("outcome is unknown"), "\(reply.text)")
            let metrics = try await client.call(.get, "/metrics")
            #expect(
                metrics.text.contains(#"ledger_apns_channel_requests_total{operation="create",outcome="failed"} 1"#),
                "\(metrics.text)")
            #expect(
                metrics.text.contains(#"ledger_apns_channel_requests_total{operation="create",outcome="unknown"} 0"#),
                "\(metrics.text)")
        }
    }

    @Test("Apple's reason and request id are bounded before they are recorded or logged")
    func boundedStrings() async throws {
        let long = String(repeating: "A", count: 65)
        #expect(APNsChannelClient.Answer(status: 400, reason: long).reason == nil)
        #expect(APNsChannelClient.Answer(status: 400, reason: String(long.dropLast())).reason?.utf8.count == 64)
        #expect(APNsChannelClient.Answer(status: 400, reason: "Bad\nReason").reason == nil)
        #expect(APNsChannelClient.Answer(status: 400, reason: "Bad Expiration").reason == nil)
        #expect(APNsChannelClient.Answer(status: 400, reason: "Bad_Expiration.Date-1").reason == "Bad_Expiration.Date-1")
        #expect(APNsChannelClient.Answer(status: 200, requestID: Self.requestID).requestID == Self.requestID)
        #expect(APNsChannelClient.Answer(status: 200, requestID: "req-9").requestID == nil)
        #expect(APNsChannelClient.Answer(status: 200, requestID: Self.requestID + "0").requestID == nil)
        #expect(
            APNsChannelClient.Answer(status: 200, requestID: "3F1C2D4E-5A6B-4C7D-8E9F-0A1B2C3D4EZZ").requestID == nil)
        // Through the route: a deletion's recorded request id is Apple's only when it is UUID-shaped.
        try await Self.server().run { client in
            try await LiveActivityChannelRouteTests.record(["scores"], in: client.ledgers)
            client.ledgers.apnsProviders.useChannelManagement(
                StandIn(deleted: APNsChannelClient.Answer(status: 204, requestID: String(repeating: "x", count: 5000))),
                for: .default)
            #expect(try await client.call(.delete, Self.channel).status == .ok)
            let ledger = try await client.ledgers.ledger(for: .default)
            let head = try ledger.readLog { try $0.head().seq }
            let event = try #require(try ledger.read { try $0.event(at: head) })
            guard case .liveActivityChannelDeleted(let change) = event.body else {
                Issue.record("not a deletion: \(event.body)")
                return
            }
            #expect(change.apnsRequestID == "")
        }
    }
}
