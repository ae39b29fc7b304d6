import Foundation
import HTTPTypes
import LedgerCore
import LedgerServer
import LedgerStore
import Testing

/// `PUT`/`DELETE …/registrations/{token}/liveActivities/{topic}` and `PUT …/pushToStartTokens/{attributesType}`
/// (issue #66 item 2): each change an event, every refusal a Google error naming the field, appending nothing.
@Suite("A device's Live Activity follows and push-to-start tokens, through the routes")
struct LiveActivityRouteTests {
    typealias Client = TestServer.Client
    static let hex = String(repeating: "5a", count: 32)
    static let other = String(repeating: "c3", count: 40)

    func follows(_ token: String, _ topic: String = "scores") -> String {
        "/v1/projects/demo-project/registrations/\(token)/liveActivities/\(topic)"
    }

    func starts(_ token: String, _ type: String = "MatchAttributes") -> String {
        "/v1/projects/demo-project/registrations/\(token)/pushToStartTokens/\(type)"
    }

    @Test("the device follows, replaces, unfollows and sets a push-to-start token; each change is one event")
    func lifecycle() async throws {
        try await TestServer().run { client in
            let token = try await client.registerDevice()
            let followed = try await client.call(
                .put, follows(token), headers: Client.device, body: #"{"pushToken":"\#(Self.hex.uppercased())"}"#)
            #expect(followed.status == .ok, "\(followed.text)")
            #expect(followed.json["topic"] as? String == "scores")
            #expect(followed.json["pushToken"] as? String == Self.hex)
            // The same token again appends nothing; a new one replaces it; /topics/ is stripped.
            let head = try await client.headSeq()
            let same = try await client.call(
                .put, follows(token), headers: Client.device, body: #"{"pushToken":"\#(Self.hex)"}"#)
            #expect(same.status == .ok)
            #expect(try await client.headSeq() == head)
            let replaced = try await client.call(
                .put, follows(token, "%2Ftopics%2Fscores"), headers: Client.device,
                body: #"{"pushToken":"\#(Self.other)"}"#)
            #expect(replaced.status == .ok)
            #expect(try await client.headSeq() == head + 1)
            let started = try await client.call(
                .put, starts(token), headers: Client.device, body: #"{"pushToken":"\#(Self.hex)"}"#)
            #expect(started.status == .ok)
            #expect(started.json["attributesType"] as? String == "MatchAttributes")
            let removed = try await client.call(.delete, follows(token), headers: Client.device)
            #expect(removed.status == .ok && removed.text == "{}")
            // Not following any more: 200, nothing appended.
            let before = try await client.headSeq()
            let again = try await client.call(.delete, follows(token), headers: Client.device)
            #expect(again.status == .ok)
            #expect(try await client.headSeq() == before)
            // The admin may act for the device, as on its APNs token.
            let admin = try await client.call(.put, follows(token, "news"), body: #"{"pushToken":"\#(Self.hex)"}"#)
            #expect(admin.status == .ok)

            let kinds = try await client.events().map(\.kind).filter {
                [.liveActivityFollowed, .liveActivityUnfollowed, .pushToStartTokenSet].contains($0)
            }
            #expect(
                kinds == [
                    .liveActivityFollowed, .liveActivityFollowed, .pushToStartTokenSet, .liveActivityUnfollowed,
                    .liveActivityFollowed,
                ])
            let unfollowed = try await client.events().first { $0.kind == .liveActivityUnfollowed }
            #expect(
                unfollowed?.body
                    == .liveActivityUnfollowed(
                        token: try RegistrationToken(token), topic: try TopicName("scores"),
                        reason: "deleted by the device"))
            #expect(unfollowed?.actor == "client")
        }
    }

    @Test("bad input is a 400 naming the field, unknown and foreign registrations are refused, nothing is appended")
    func refusals() async throws {
        try await TestServer().run { client in
            let token = try await client.registerDevice()
            let android = try await client.registerDevice(platform: "android")
            let before = try await client.headSeq()
            let cases: [(String, String?, HTTPResponse.Status, String?)] = [
                (follows(token), "{}", .badRequest, "pushToken"),
                (follows(token), #"{"pushToken":"abc"}"#, .badRequest, "pushToken"),
                (follows(token), #"{"pushToken":"\#(String(repeating: "ab", count: 15))"}"#, .badRequest, "pushToken"),
                (follows(token), #"{"pushToken":"\#(String(repeating: "ab", count: 201))"}"#, .badRequest, "pushToken"),
                (follows(token), #"{"pushToken":" \#(Self.hex) "}"#, .badRequest, "pushToken"),
                (follows(token), #"{"pushToken":"\#(Self.hex)","sandbox":true}"#, .badRequest, "sandbox"),
                (follows(token), #"{"pushToken":7}"#, .badRequest, "pushToken"),
                (follows(token), "[]", .badRequest, nil),
                (follows(token), nil, .badRequest, nil),
                (follows(token, "bad%20topic"), #"{"pushToken":"\#(Self.hex)"}"#, .badRequest, "topic"),
                (follows(android), #"{"pushToken":"\#(Self.hex)"}"#, .badRequest, "pushToken"),
                (starts(token, "9Lives"), #"{"pushToken":"\#(Self.hex)"}"#, .badRequest, "attributesType"),
                (starts(token, "Match%20Attributes"), #"{"pushToken":"\#(Self.hex)"}"#, .badRequest, "attributesType"),
                (starts(token), #"{"pushToken":"zz"}"#, .badRequest, "pushToken"),
                (follows("cNEVERREGISTERED:APA91b-x"), #"{"pushToken":"\#(Self.hex)"}"#, .notFound, nil),
            ]
            for (path, body, status, field) in cases {
                let reply = try await client.call(.put, path, headers: Client.device, body: body)
                #expect(reply.status == status, "\(path) \(body ?? "-"): \(reply.text)")
                #expect(reply.googleStatus != nil, "\(reply.text)")
                if let field { #expect(reply.fieldViolations.first?["field"] == field, "\(path) \(body ?? "-")") }
            }
            // Other credentials: a wrong key, none, the auditor.
            let wrongKey: HTTPFields = [HTTPField.Name("x-goog-api-key")!: "not-the-key"]
            for headers in [wrongKey, [:], Client.auditor] {
                let reply = try await client.call(
                    .put, follows(token), headers: headers, body: #"{"pushToken":"\#(Self.hex)"}"#)
                #expect(reply.status == .unauthorized || reply.status == .forbidden, "\(reply.text)")
                let removal = try await client.call(.delete, follows(token), headers: headers)
                #expect(removal.status == .unauthorized || removal.status == .forbidden)
            }
            #expect(try await client.headSeq() == before)
        }
    }

    @Test("a topic send with apns-push-type liveactivity is accepted; an end retires the followers in its request")
    func endRetires() async throws {
        try await TestServer().run { client in
            let token = try await client.registerDevice()
            _ = try await client.call(
                .put, follows(token), headers: Client.device, body: #"{"pushToken":"\#(Self.hex)"}"#)
            let end = #"""
                {"message":{"topic":"scores","apns":{"headers":{"apns-push-type":"liveactivity"},"payload":{"aps":{"timestamp":1764201600,"event":"end"}}}}}
                """#
            let sent = try await client.call(.post, "/v1/projects/demo-project/messages:send", body: end)
            #expect(sent.status == .ok, "\(sent.text)")
            let events = try await client.events()
            guard let index = events.lastIndex(where: { $0.kind == .sent }), index + 1 < events.count else {
                Issue.record("no send")
                return
            }
            guard case .liveActivitiesEnded(let topic, let sendSeq, _) = events[index + 1].body else {
                Issue.record("after the send: \(events[index + 1].kind)")
                return
            }
            #expect(topic.rawValue == "scores" && sendSeq == events[index].seq)
            #expect(events[index + 1].requestID == events[index].requestID)
            // To a condition: still refused.
            let condition = try await client.call(
                .post, "/v1/projects/demo-project/messages:send",
                body: end.replacingOccurrences(of: #""topic":"scores""#, with: #""condition":"'scores' in topics""#))
            #expect(condition.status == .badRequest)
            #expect(condition.fieldViolations.first?["field"] == "message.apns.headers.apns-push-type")
        }
    }
}
