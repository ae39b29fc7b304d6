import Foundation
import HTTPTypes
import LedgerCore
import LedgerServer
import Testing

@Suite("FCM v1 send")
struct SendTests {
    let send = "/v1/projects/demo-project/messages:send"

    @Test("a topic send is acknowledged with a 63-bit message id and stored as a sent event")
    func topicSend() async throws {
        try await TestServer().run { client in
            let reply = try await client.call(
                .post, send,
                body:
                    #"{"message":{"topic":"/topics/news","notification":{"title":"Hi","body":"There"},"data":{"k":"v"}}}"#
            )
            #expect(reply.status == .ok)
            let name = try #require(reply.json["name"] as? String)
            #expect(name.hasPrefix("projects/demo-project/messages/"))
            let id = try #require(UInt64(name.split(separator: "/").last!))
            #expect(id >= 1 && id <= UInt64(Int64.max))
            guard let (event, sent) = try await client.lastSent() else {
                Issue.record("expected a sent event")
                return
            }
            #expect(sent.messageID == id)
            #expect(sent.target == .topic(try TopicName("news")))
            #expect(sent.precedence == .leftToRight)
            #expect(String(decoding: sent.messageJSON, as: UTF8.self).contains("\"title\":\"Hi\""))
            #expect(event.actor == "admin")
            // Its audience follows, appended by the ledger itself.
            guard case .audience(let audience) = try await client.events().last?.body else {
                Issue.record("expected the send's audience event")
                return
            }
            #expect(audience.messageID == id && audience.sendSeq == event.seq && audience.recipientCount == 0)
        }
    }

    @Test("condition and token sends; a token that is not registered is 404 UNREGISTERED")
    func conditionAndTokenSends() async throws {
        try await TestServer().run { client in
            let token = try await client.registerDevice()
            let condition = try await client.call(
                .post, send, body: #"{"message":{"condition":"'A' in topics && !('B' in topics)"}}"#)
            #expect(condition.status == .ok)
            let direct = try await client.call(.post, send, body: #"{"message":{"token":"\#(token)"}}"#)
            #expect(direct.status == .ok)
            // firebase-admin 7.7 sends `fid` for Message(fid=…): the same instance target.
            let fid = try await client.call(.post, send, body: #"{"message":{"fid":"\#(token)"}}"#)
            #expect(fid.status == .ok)
            guard let (_, sent) = try await client.lastSent() else {
                Issue.record("expected a sent event")
                return
            }
            #expect(sent.target == .token(try RegistrationToken(token)))
            let before = try await client.headSeq()
            let unknown = try await client.call(.post, send, body: #"{"message":{"token":"not-registered-token"}}"#)
            #expect(unknown.status == .notFound)
            #expect(unknown.errorCode == "UNREGISTERED")
            #expect(unknown.googleStatus == "NOT_FOUND")
            #expect(try await client.headSeq() == before)
        }
    }

    @Test("validate_only validates and appends nothing")
    func validateOnly() async throws {
        try await TestServer().run { client in
            let before = try await client.headSeq()
            let dry = try await client.call(.post, send, body: #"{"message":{"topic":"news"},"validate_only":true}"#)
            #expect(dry.status == .ok)
            #expect(dry.json["name"] as? String == "projects/demo-project/messages/fake_message_id")
            let camel = try await client.call(.post, send, body: #"{"message":{"topic":"news"},"validateOnly":true}"#)
            #expect(camel.status == .ok)
            let bad = try await client.call(
                .post, send, body: #"{"message":{"topic":"bad topic"},"validate_only":true}"#)
            #expect(bad.status == .badRequest)
            #expect(try await client.headSeq() == before)
        }
    }

    @Test(
        "bad messages get 400 INVALID_ARGUMENT naming the field, and append nothing",
        arguments: [
            (#"{"message":{}}"#, "message", "exactly one of token, fid, topic or condition; it has none"),
            (#"{"message":{"fid":"a","token":"b"}}"#, "message", "it has token, fid"),
            (#"{"message":{"fid":"bad fid"}}"#, "message.fid", "character outside"),
            (#"{"message":{"topic":"a","token":"b"}}"#, "message", "it has token, topic"),
            (#"{"message":{"topic":"bad topic!"}}"#, "message.topic", "character outside"),
            (#"{"message":{"topic":""}}"#, "message.topic", "topic name is empty"),
            (#"{"message":{"topic":"\#(String(repeating: "x", count: 901))"}}"#, "message.topic", "longer than 900"),
            (#"{"message":{"topic":7}}"#, "message.topic", "must be a string"),
            (#"{"message":{"condition":"'A' in topics &&"}}"#, "message.condition", "after '&&' at offset 14"),
            (
                #"{"message":{"condition":"'A' in topics && 'B' in topics && 'C' in topics && 'D' in topics && 'E' in topics && 'F' in topics"}}"#,
                "message.condition", "too many topic operands"
            ),
            (#"{"message":{"token":"bad token"}}"#, "message.token", "character outside"),
            (#"{"message":{"topic":"a","data":{"from":"x"}}}"#, "message.data.from", "reserved"),
            (#"{"message":{"topic":"a","data":{"google.x":"x"}}}"#, "message.data.google.x", "reserved"),
            (#"{"message":{"topic":"a","data":{"gcm.y":"x"}}}"#, "message.data.gcm.y", "reserved"),
            (#"{"message":{"topic":"a","data":{"message_type":"x"}}}"#, "message.data.message_type", "reserved"),
            (#"{"message":{"topic":"a","data":{"APS":"x"}}}"#, "message.data.APS", "reserved"),
            (#"{"message":{"topic":"a","data":{"n":1}}}"#, "message.data.n", "must be strings"),
            (#"{"message":{"topic":"a","data":"x"}}"#, "message.data", "object of strings"),
            (
                #"{"message":{"topic":"a","notification":{"title":5}}}"#, "message.notification.title",
                "must be a string"
            ),
            (#"{"message":{"topic":"a","notification":{"sound":"x"}}}"#, "message.notification.sound", "unknown field"),
            (#"{"message":{"topic":"a","android":"x"}}"#, "message.android", "must be an object"),
            // The platform configurations, by the v1 proto types.
            (#"{"message":{"topic":"a","apns":{"payload":"x"}}}"#, "message.apns.payload", "must be an object"),
            (
                #"{"message":{"topic":"a","apns":{"headers":{"apns-priority":7}}}}"#,
                "message.apns.headers.apns-priority", "must be strings"
            ),
            (
                #"{"message":{"topic":"a","apns":{"headers":{"apns-priority":"7"}}}}"#,
                "message.apns.headers.apns-priority", "must be \"10\", \"5\" or \"1\""
            ),
            (
                #"{"message":{"topic":"a","apns":{"payload":{"aps":{"badge":"3"}}}}}"#,
                "message.apns.payload.aps.badge", "must be an integer"
            ),
            (#"{"message":{"topic":"a","apns":{"payload":{"from":"x"}}}}"#, "message.apns.payload.from", "reserved"),
            (
                #"{"message":{"topic":"a","android":{"priority":"urgent"}}}"#, "message.android.priority",
                "must be one of high, normal"
            ),
            (
                ##"{"message":{"topic":"a","android":{"notification":{"colour":"#ff0000"}}}}"##,
                "message.android.notification.colour", "unknown field"
            ),
            (
                #"{"message":{"topic":"a","webpush":{"fcm_options":{"link":"http://example.com"}}}}"#,
                "message.webpush.fcm_options.link", "HTTPS"
            ),
            (#"{"message":{"topic":"a","data":{"fcm_options":"x"}}}"#, "message.data.fcm_options", "reserved"),
            (#"{"message":{"topic":"a","bogus":1}}"#, "message.bogus", "unknown field"),
            (
                #"{"message":{"topic":"a","data":{"k":"\#(String(repeating: "v", count: 4100))"}}}"#, "message",
                "at most 4096"
            ),
            (#"{"message":{"topic":"a"},"extra":true}"#, "extra", "Unknown field"),
            (#"{"message":{"topic":"a"},"validate_only":"yes"}"#, "validate_only", "must be a boolean"),
            (#"{"message":"text"}"#, "message", "must be an object"),
        ])
    func badMessages(body: String, field: String, fragment: String) async throws {
        try await TestServer().run { client in
            let before = try await client.headSeq()
            let reply = try await client.call(.post, send, body: body)
            #expect(reply.status == .badRequest, "\(reply.text)")
            #expect(reply.googleStatus == "INVALID_ARGUMENT")
            #expect(reply.errorCode == "INVALID_ARGUMENT")
            #expect(reply.error["code"] as? Int == 400)
            #expect(reply.fieldViolations.first?["field"] == field, "\(reply.text)")
            #expect((reply.error["message"] as? String)?.contains(fragment) == true, "\(reply.text)")
            #expect(try await client.headSeq() == before)
        }
    }

    @Test(
        "a Live Activity message is checked at send in any project: refused naming the field; validate_only appends nothing"
    )
    func liveActivity() async throws {
        try await TestServer().run { client in
            let token = try await client.registerDevice()
            let activity = String(repeating: "a7", count: 40)
            func message(_ aps: String) -> String {
                #"{"token":"\#(token)","apns":{"live_activity_token":"\#(activity)","payload":{"aps":\#(aps)}}}"#
            }
            let update = #"{"timestamp":1764201600,"event":"update","content-state":{"score":"1-0"}}"#
            let before = try await client.headSeq()
            for (aps, field) in [
                (#"{"event":"update","content-state":{}}"#, "message.apns.payload.aps.timestamp"),
                (#"{"timestamp":1,"event":"pause","content-state":{}}"#, "message.apns.payload.aps.event"),
                (#"{"timestamp":99999999999999999999,"event":"end"}"#, "message.apns.payload.aps.timestamp"),
            ] {
                for validateOnly in [false, true] {
                    let reply = try await client.call(
                        .post, send, body: #"{"message":\#(message(aps)),"validate_only":\#(validateOnly)}"#)
                    #expect(reply.status == .badRequest, "\(reply.text)")
                    #expect(reply.fieldViolations.first?["field"] == field, "\(reply.text)")
                }
            }
            let dry = try await client.call(.post, send, body: #"{"message":\#(message(update)),"validate_only":true}"#)
            #expect(dry.status == .ok)
            #expect(dry.json["name"] as? String == "projects/demo-project/messages/fake_message_id")
            #expect(try await client.headSeq() == before)
            // Accepted and stored as given; the push (a project with APNs) is IntegrationTests/apns-standin's.
            let sent = try await client.call(.post, send, body: #"{"message":\#(message(update))}"#)
            #expect(sent.status == .ok)
            guard let (_, stored) = try await client.lastSent() else {
                Issue.record("expected a sent event")
                return
            }
            #expect(stored.target == .token(try RegistrationToken(token)))
            #expect(String(decoding: stored.messageJSON, as: UTF8.self).contains(activity))
        }
    }

    @Test("malformed, empty and huge bodies are clear 4xx errors; the server keeps serving")
    func badBodies() async throws {
        try await TestServer(configure: { $0.maximumBodyBytes = 10_000 }).run { client in
            for body in ["{", "", "[1,2]", "\"text\"", "null"] {
                let reply = try await client.call(.post, send, body: body)
                #expect(reply.status == .badRequest, "\(body)")
                #expect(reply.googleStatus == "INVALID_ARGUMENT")
            }
            let huge = try await client.call(
                .post, send,
                body: #"{"message":{"topic":"a","data":{"k":""# + String(repeating: "x", count: 20_000) + "\"}}}")
            #expect(huge.status == .contentTooLarge)
            #expect(try await client.headSeq() == 0)
            let healthy = try await client.call(.get, "/healthz")
            #expect(healthy.status == .ok)
        }
    }

    @Test("credentials: missing or wrong → 401; auditor on a write route or another project → 403")
    func credentials() async throws {
        try await TestServer().run { client in
            let body = #"{"message":{"topic":"news"}}"#
            let missing = try await client.call(.post, send, headers: [:], body: body)
            #expect(missing.status == .unauthorized)
            #expect(missing.googleStatus == "UNAUTHENTICATED")
            let wrong = try await client.call(.post, send, headers: [.authorization: "Bearer nope"], body: body)
            #expect(wrong.status == .unauthorized)
            let auditor = try await client.call(.post, send, headers: TestServer.Client.auditor, body: body)
            #expect(auditor.status == .forbidden)
            #expect(auditor.googleStatus == "PERMISSION_DENIED")
            let device = try await client.call(.post, send, headers: TestServer.Client.device, body: body)
            #expect(device.status == .forbidden)
            let otherProject = try await client.call(.post, "/v1/projects/other-project/messages:send", body: body)
            #expect(otherProject.status == .forbidden)
            let badProject = try await client.call(.post, "/v1/projects/..%2Fx/messages:send", body: body)
            #expect(badProject.status == .notFound)
            #expect(try await client.headSeq() == 0)
        }
    }

    @Test("topic listing with subscriber counts, for admin and auditor")
    func topicListing() async throws {
        try await TestServer().run { client in
            let token = try await client.registerDevice()
            _ = try await client.call(
                .post, "/v1/projects/demo-project/registrations/\(token)/topicSubscriptions?topicName=news", body: "{}")
            for headers in [TestServer.Client.admin, TestServer.Client.auditor] {
                let reply = try await client.call(.get, "/v1/projects/demo-project/topics", headers: headers)
                #expect(reply.status == .ok)
                let topics = reply.json["topics"] as? [[String: Any]]
                #expect(topics?.count == 1)
                #expect(topics?.first?["name"] as? String == "news")
                #expect(topics?.first?["subscriberCount"] as? Int == 1)
            }
        }
    }
}
