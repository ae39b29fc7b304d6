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
