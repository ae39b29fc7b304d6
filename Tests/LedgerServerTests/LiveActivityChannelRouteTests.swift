import Foundation
import HTTPTypes
import LedgerCore
import LedgerStore
import LedgerTestSupport
import Testing

@testable import LedgerServer

/// The broadcast channel routes before Apple is asked (the stand-in's end-to-end tests are
/// IntegrationTests/apns-standin/test_ledger_broadcast.py): every refusal is a clear error that appends nothing, and
/// the reads show what the ledger recorded.
@Suite("Live Activity broadcast channel routes: validation and reads", .timeLimit(.minutes(2)))
struct LiveActivityChannelRouteTests {
    static let base = "/v1/projects/demo-project"
    static let create = base + "/topics/scores:createLiveActivityChannel"
    static let channel = base + "/topics/scores:liveActivityChannel"

    /// A server whose demo project broadcasts, with a key file that cannot be read: whatever gets past the ledger's
    /// own checks fails at the key (503), before Apple could be asked.
    static func broadcasting() throws -> TestServer {
        TestServer { configuration in
            configuration.apns[.default] = try? APNsSettings(
                section: [
                    "teamId": "ABCDE12345", "keyId": "KEY1234567", "keyFile": "/nowhere/AuthKey.p8",
                    "topic": "com.example.app",
                ],
                broadcast: true, field: "test")
        }
    }

    /// Records channels for `topics` as the create route does once Apple has answered.
    static func record(_ topics: [String], in ledgers: LedgerRegistry) async throws {
        let ledger = try await ledgers.ledger(for: .default)
        let operations = try topics.enumerated().map { index, topic in
            LedgerOperation.recordLiveActivityChannelCreated(
                LiveActivityChannelChange(
                    topic: try TopicName(topic), channelID: "Y2hhbm5lbC0\(index)AAAAAA==",
                    messageStoragePolicy: UInt32(index % 2), apnsRequestID: "r-\(index)"))
        }
        _ = try await ledger.append(WriteRequest(actor: "admin", requestID: "test", operations: operations))
    }

    @Test(
        "a bad body is 400 naming its field, and appends nothing",
        arguments: [
            ("{}", "messageStoragePolicy"),
            (#"{"messageStoragePolicy":2}"#, "messageStoragePolicy"),
            (#"{"messageStoragePolicy":-1}"#, "messageStoragePolicy"),
            (#"{"messageStoragePolicy":"0"}"#, "messageStoragePolicy"),
            (#"{"messageStoragePolicy":true}"#, "messageStoragePolicy"),
            (#"{"messageStoragePolicy":0.5}"#, "messageStoragePolicy"),
            (#"{"messageStoragePolicy":99999999999999999999999}"#, "messageStoragePolicy"),
            (#"{"message_storage_policy":7}"#, "message_storage_policy"),
            (#"{"messageStoragePolicy":0,"message_storage_policy":0}"#, "messageStoragePolicy"),
            (#"{"messageStoragePolicy":0,"pushType":"LiveActivity"}"#, "pushType"),
            // Only the integer literals 0 and 1: a number with a fraction or an exponent is refused even when its
            // value is 0 or 1 (JSONDecoder reads `1.0` and `1e0` as the Int 1).
            (#"{"messageStoragePolicy":1.0}"#, "messageStoragePolicy"),
            (#"{"messageStoragePolicy":0.0}"#, "messageStoragePolicy"),
            (#"{"messageStoragePolicy":1e0}"#, "messageStoragePolicy"),
            (#"{"messageStoragePolicy":0E0}"#, "messageStoragePolicy"),
            (#"{"messageStoragePolicy":10e-1}"#, "messageStoragePolicy"),
            (#"{"message_storage_policy":1.0}"#, "message_storage_policy"),
            (#"{"messageStoragePolicy":false}"#, "messageStoragePolicy"),
            (#"{"messageStoragePolicy":null}"#, "messageStoragePolicy"),
            (#"{"messageStoragePolicy":[1]}"#, "messageStoragePolicy"),
            (#"{"messageStoragePolicy":{"value":1}}"#, "messageStoragePolicy"),
            // A padded name is an unknown field, as in every other body.
            (#"{" messageStoragePolicy":0}"#, " messageStoragePolicy"),
            (#"{"messageStoragePolicy ":0}"#, "messageStoragePolicy "),
        ])
    func badBodies(body: String, field: String) async throws {
        try await Self.broadcasting().run { client in
            let before = try await client.headSeq()
            let reply = try await client.call(.post, Self.create, body: body)
            #expect(reply.status == .badRequest, "\(body): \(reply.text)")
            #expect(reply.googleStatus == "INVALID_ARGUMENT")
            #expect(reply.fieldViolations.first?["field"] == field, "\(body): \(reply.text)")
            #expect(try await client.headSeq() == before)
        }
    }

    @Test(
        "a body that is not one JSON object is 400 INVALID_ARGUMENT without a field, and appends nothing",
        arguments: [
            #"{"messageStoragePolicy":0,"messageStoragePolicy":1}"#,
            #"{"messageStoragePolicy":1,"messageStoragePolic\u0079":1}"#,
            #"{"messageStoragePolicy":1,}"#,
            #"{"messageStoragePolicy":1} {}"#,
            #"[{"messageStoragePolicy":1}]"#,
            "1",
        ])
    func notOneObject(body: String) async throws {
        try await Self.broadcasting().run { client in
            let before = try await client.headSeq()
            let reply = try await client.call(.post, Self.create, body: body)
            #expect(reply.status == .badRequest, "\(body): \(reply.text)")
            #expect(reply.googleStatus == "INVALID_ARGUMENT", "\(body): \(reply.text)")
            #expect(try await client.headSeq() == before)
        }
    }

    @Test("the integer literals 0 and 1 (either spelling, an escaped name too) get past the body's checks")
    func goodBodies() async throws {
        try await Self.broadcasting().run { client in
            for body in [
                #"{"messageStoragePolicy":0}"#, #"{"messageStoragePolicy": 1 }"#, #"{"message_storage_policy":1}"#,
                #"{"messageStoragePolic\u0079":0}"#,
            ] {
                // Past the body's checks, the unreadable key answers 503.
                let reply = try await client.call(.post, Self.create, body: body)
                #expect(reply.status == .serviceUnavailable, "\(body): \(reply.text)")
            }
        }
    }

    @Test("a project that does not broadcast is 400 FAILED_PRECONDITION; credentials and paths are checked")
    func refusedBeforeApple() async throws {
        try await TestServer().run { client in
            let before = try await client.headSeq()
            let reply = try await client.call(.post, Self.create, body: #"{"messageStoragePolicy":0}"#)
            #expect(reply.status == .badRequest && reply.googleStatus == "FAILED_PRECONDITION", "\(reply.text)")
            #expect(reply.text.contains("apns.broadcast"))
            // A device or the auditor may not make channels; an unknown custom method is 404; a bad topic is 400.
            let device = try await client.call(
                .post, Self.create, headers: TestServer.Client.device, body: #"{"messageStoragePolicy":0}"#)
            #expect(device.status == .unauthorized || device.status == .forbidden, "\(device.text)")
            let auditor = try await client.call(
                .post, Self.create, headers: TestServer.Client.auditor, body: #"{"messageStoragePolicy":0}"#)
            #expect(auditor.status == .forbidden || auditor.status == .unauthorized, "\(auditor.text)")
            let unknown = try await client.call(
                .post, Self.base + "/topics/scores:makeChannel", body: #"{"messageStoragePolicy":0}"#)
            #expect(unknown.status == .notFound)
            let badTopic = try await client.call(
                .post, Self.base + "/topics/sc%20ores:createLiveActivityChannel", body: #"{"messageStoragePolicy":0}"#)
            #expect(badTopic.status == .badRequest && badTopic.fieldViolations.first?["field"] == "topic")
            // Nothing to delete; deleting in a project that does not broadcast is refused the same way.
            #expect(try await client.call(.delete, Self.channel).googleStatus == "FAILED_PRECONDITION")
            #expect(try await client.headSeq() == before)
            // A liveactivity send to the topic cannot be a broadcast here: it goes to the topic's followers (its
            // `sent` event names no channel).
            let send = try await client.call(
                .post, Self.base + "/messages:send",
                body:
                    #"{"message":{"topic":"scores","apns":{"headers":{"apns-push-type":"liveactivity"},"payload":{"aps":{"timestamp":1,"event":"update","content-state":{}}}}}}"#
            )
            #expect(send.status == .ok, "\(send.text)")
            let sent = try await client.ledgers.ledger(for: .default).read { try $0.sentEvent(at: before + 1).1 }
            #expect(sent.broadcastChannelID == nil)
        }
    }

    @Test("a topic with a channel is 409 and the 10,000th channel is the last, both before the key is read")
    func limits() async throws {
        try await Self.broadcasting().run { client in
            try await Self.record(["scores"], in: client.ledgers)
            let before = try await client.headSeq()
            let again = try await client.call(.post, Self.create, body: #"{"messageStoragePolicy":1}"#)
            #expect(again.status == .conflict && again.errorCode == "ALREADY_EXISTS", "\(again.text)")
            // A new topic gets past the ledger's checks: the unreadable key answers 503, and nothing is recorded.
            let other = try await client.call(
                .post, Self.base + "/topics/weather:createLiveActivityChannel", body: #"{"messageStoragePolicy":1}"#)
            #expect(other.status == .serviceUnavailable, "\(other.text)")
            #expect(try await client.headSeq() == before)
            try await Self.record(
                (1..<LiveActivityChannelRoutes.maximumChannels).map { "t\($0)" }, in: client.ledgers)
            let full = try await client.headSeq()
            let refused = try await client.call(
                .post, Self.base + "/topics/weather:createLiveActivityChannel", body: #"{"messageStoragePolicy":1}"#)
            #expect(refused.status == .badRequest && refused.errorCode == "TOO_MANY_CHANNELS", "\(refused.text)")
            #expect(try await client.headSeq() == full)
            let metrics = try await client.call(.get, "/metrics")
            #expect(
                metrics.text.contains(
                    #"ledger_apns_channel_requests_total{operation="create",outcome="refused"} 1"#), "\(metrics.text)")
        }
    }

    @Test("the reads: a topic's channel, 404 without one, the list a page at a time, and the device's own view")
    func reads() async throws {
        try await Self.broadcasting().run { client in
            #expect(try await client.call(.get, Self.channel).status == .notFound)
            let empty = try await client.call(.get, Self.base + "/liveActivityChannels")
            #expect(empty.status == .ok && (empty.json["liveActivityChannels"] as? [Any])?.isEmpty == true)
            try await Self.record(["scores", "alpha", "weather"], in: client.ledgers)
            let shown = try await client.call(.get, Self.channel, headers: TestServer.Client.auditor)
            #expect(shown.status == .ok, "\(shown.text)")
            #expect(shown.json["channelId"] as? String == "Y2hhbm5lbC00AAAAAA==")
            #expect(shown.json["messageStoragePolicy"] as? Int == 0)
            #expect(shown.json["topic"] as? String == "scores")
            #expect(shown.json["name"] as? String == "projects/demo-project/topics/scores/liveActivityChannel")
            #expect(shown.json["createTime"] as? String != nil && shown.json["createSeq"] as? String != nil)
            let first = try await client.call(.get, Self.base + "/liveActivityChannels?pageSize=2")
            let firstTopics = (first.json["liveActivityChannels"] as? [[String: Any]])?.compactMap { $0["topic"] }
            #expect(firstTopics as? [String] == ["alpha", "scores"])
            let token = try #require(first.json["nextPageToken"] as? String)
            let second = try await client.call(.get, Self.base + "/liveActivityChannels?pageSize=2&pageToken=\(token)")
            let secondTopics = (second.json["liveActivityChannels"] as? [[String: Any]])?.compactMap { $0["topic"] }
            #expect(secondTopics as? [String] == ["weather"])
            #expect(second.json["nextPageToken"] == nil)
            #expect(
                try await client.call(.get, Self.base + "/liveActivityChannels?pageToken=no%20such").status
                    == .badRequest)
            // A registered device reads a topic's channel with the client key; an unknown token is UNREGISTERED.
            let device = try await client.registerDevice()
            let view = try await client.call(
                .get, Self.base + "/registrations/\(device)/liveActivityChannels/weather",
                headers: TestServer.Client.device)
            #expect(view.status == .ok && view.json["channelId"] as? String == "Y2hhbm5lbC02AAAAAA==", "\(view.text)")
            let none = try await client.call(
                .get, Self.base + "/registrations/\(device)/liveActivityChannels/news",
                headers: TestServer.Client.device)
            #expect(none.status == .notFound && none.errorCode == "CHANNEL_NOT_FOUND", "\(none.text)")
            // The admin's read says the same; an unknown route is another NOT_FOUND.
            #expect(try await client.call(.get, Self.base + "/topics/news:liveActivityChannel").errorCode == "CHANNEL_NOT_FOUND")
            #expect(try await client.call(.get, Self.base + "/topics/news:nothing").errorCode == "NOT_FOUND")
            let stranger = try await client.call(
                .get, Self.base + "/registrations/not-a-registered-token/liveActivityChannels/weather",
                headers: TestServer.Client.device)
            #expect(stranger.status == .notFound && stranger.errorCode == "UNREGISTERED")
        }
    }
}
