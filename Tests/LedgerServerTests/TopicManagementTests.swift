import Foundation
import HTTPTypes
import LedgerCore
import LedgerServer
import Testing

@Suite("FCM v1 topic management")
struct TopicManagementTests {
    func base(_ token: String) -> String { "/v1/projects/demo-project/registrations/\(token)/topicSubscriptions" }

    @Test("subscribe, already subscribed (409), get, list, unsubscribe, allowMissing")
    func lifecycle() async throws {
        try await TestServer().run { client in
            let token = try await client.registerDevice()
            let created = try await client.call(.post, base(token) + "?topicName=news", body: "{}")
            #expect(created.status == .ok)
            #expect(created.json["topicName"] as? String == "news")
            #expect(
                created.json["name"] as? String
                    == "projects/demo-project/registrations/\(token)/topicSubscriptions/news")
            #expect((created.json["createTime"] as? String)?.hasSuffix("Z") == true)
            let snake = try await client.call(.post, base(token) + "?topic_name=%2Ftopics%2Fsports", body: "{}")
            #expect(snake.status == .ok)
            #expect(snake.json["topicName"] as? String == "sports")
            let before = try client.headSeq()
            let again = try await client.call(.post, base(token) + "?topicName=news", body: "{}")
            #expect(again.status == .conflict)
            #expect(again.googleStatus == "ALREADY_EXISTS")
            #expect(try client.headSeq() == before)
            let got = try await client.call(.get, base(token) + "/news")
            #expect(got.status == .ok)
            #expect(got.json["createTime"] as? String == created.json["createTime"] as? String)
            let listed = try await client.call(.get, base(token))
            #expect(
                (listed.json["topicSubscriptions"] as? [[String: Any]])?.map { $0["topicName"] as? String } == [
                    "news", "sports",
                ])
            let removed = try await client.call(.delete, base(token) + "/news")
            #expect(removed.status == .ok)
            #expect(removed.text == "{}")
            let missing = try await client.call(.delete, base(token) + "/news")
            #expect(missing.status == .notFound)
            let allowed = try await client.call(.delete, base(token) + "/news?allow_missing=true")
            #expect(allowed.status == .ok)
            let gone = try await client.call(.get, base(token) + "/news")
            #expect(gone.status == .notFound)
            let vias = try client.events().compactMap { event -> SubscriptionChannel? in
                if case .subscribed(_, _, let via) = event.body { return via }
                return nil
            }
            #expect(vias == [.v1, .v1])
        }
    }

    @Test("unknown token 404 NOT_FOUND, malformed token and bad topics 400 INVALID_ARGUMENT; nothing appended")
    func errors() async throws {
        try await TestServer().run { client in
            let token = try await client.registerDevice()
            let before = try client.headSeq()
            let unknown = try await client.call(.post, base("unknown-token") + "?topicName=news", body: "{}")
            #expect(unknown.status == .notFound)
            #expect(unknown.errorCode == "NOT_FOUND")
            let malformed = try await client.call(.post, base("bad%20token") + "?topicName=news", body: "{}")
            #expect(malformed.status == .badRequest)
            #expect(malformed.errorCode == "INVALID_ARGUMENT")
            for query in [
                "", "?topicName=", "?topicName=bad%20topic", "?topicName=" + String(repeating: "x", count: 901),
            ] {
                let reply = try await client.call(.post, base(token) + query, body: "{}")
                #expect(reply.status == .badRequest, "\(query)")
                #expect(reply.errorCode == "INVALID_ARGUMENT")
            }
            #expect(try client.headSeq() == before)
        }
    }

    @Test("the topic limit per instance: the next subscription is 400 TOO_MANY_TOPICS")
    func topicLimit() async throws {
        try await TestServer(configure: { $0.limits.maximumTopicsPerInstance = 3 }).run { client in
            let token = try await client.registerDevice()
            for topic in ["a", "b", "c"] {
                #expect(try await client.call(.post, base(token) + "?topicName=\(topic)", body: "{}").status == .ok)
            }
            let before = try client.headSeq()
            let refused = try await client.call(.post, base(token) + "?topicName=d", body: "{}")
            #expect(refused.status == .badRequest)
            #expect(refused.errorCode == "TOO_MANY_TOPICS")
            #expect(try client.headSeq() == before)
        }
    }

    @Test("list pages with nextPageToken")
    func paging() async throws {
        try await TestServer().run { client in
            let token = try await client.registerDevice()
            for topic in ["t1", "t2", "t3", "t4", "t5"] {
                _ = try await client.call(.post, base(token) + "?topicName=\(topic)", body: "{}")
            }
            var names: [String] = []
            var pageToken: String?
            repeat {
                let reply = try await client.call(
                    .get, base(token) + "?pageSize=2" + (pageToken.map { "&pageToken=\($0)" } ?? ""))
                #expect(reply.status == .ok)
                names += (reply.json["topicSubscriptions"] as? [[String: Any]] ?? []).compactMap {
                    $0["topicName"] as? String
                }
                pageToken = reply.json["nextPageToken"] as? String
            } while pageToken != nil
            #expect(names == ["t1", "t2", "t3", "t4", "t5"])
            let bad = try await client.call(.get, base(token) + "?pageSize=0")
            #expect(bad.status == .badRequest)
        }
    }

    @Test("a device manages its own subscriptions with its client key (via client)")
    func deviceSelfService() async throws {
        try await TestServer().run { client in
            let token = try await client.registerDevice()
            let reply = try await client.call(
                .post, base(token) + "?topicName=weather", headers: TestServer.Client.device, body: "{}")
            #expect(reply.status == .ok)
            guard case .subscribed(_, _, let via) = try client.events().last?.body else {
                Issue.record("expected a subscription")
                return
            }
            #expect(via == .client)
            let auditor = try await client.call(
                .post, base(token) + "?topicName=x", headers: TestServer.Client.auditor, body: "{}")
            #expect(auditor.status == .forbidden)
        }
    }
}

@Suite("Legacy Instance ID")
struct InstanceIDTests {
    @Test("batchAdd and batchRemove: one result per token in order, per-token errors")
    func batches() async throws {
        try await TestServer().run { client in
            let good = try await client.registerDevice()
            let other = try await client.registerDevice()
            let add = try await client.call(
                .post, "/iid/v1:batchAdd",
                body:
                    #"{"to":"/topics/news","registration_tokens":["\#(good)","unknown-token","bad token","\#(other)"]}"#
            )
            #expect(add.status == .ok)
            let results = add.json["results"] as? [[String: String]]
            #expect(results == [[:], ["error": "NOT_FOUND"], ["error": "INVALID_ARGUMENT"], [:]])
            let remove = try await client.call(
                .post, "/iid/v1:batchRemove", body: #"{"to":"news","registration_tokens":["\#(good)","\#(good)"]}"#)
            #expect(remove.json["results"] as? [[String: String]] == [[:], [:]])
            let all = try client.events()
            let lastRequest = all.last?.requestID
            // Removing twice in one batch: the second changes nothing, so one event.
            #expect(all.filter { $0.requestID == lastRequest }.count == 1)
            #expect(all.last?.kind == .unsubscribed)
        }
    }

    @Test("whole-request errors: 1001 tokens, empty list, bad topic, bad JSON → 400 {\"error\":\"INVALID_ARGUMENT\"}")
    func wholeRequestErrors() async throws {
        try await TestServer().run { client in
            let many = (0...1000).map { "\"t\($0)\"" }.joined(separator: ",")
            for body in [
                #"{"to":"/topics/news","registration_tokens":[\#(many)]}"#,
                #"{"to":"/topics/news","registration_tokens":[]}"#,
                #"{"to":"/topics/bad topic","registration_tokens":["a"]}"#,
                #"{"registration_tokens":["a"]}"#,
                #"{"to":"/topics/news","registration_tokens":"a"}"#,
                "{",
            ] {
                let reply = try await client.call(.post, "/iid/v1:batchAdd", body: body)
                #expect(reply.status == .badRequest)
                #expect(reply.text == #"{"error":"INVALID_ARGUMENT"}"#)
            }
            #expect(try client.headSeq() == 0)
            let unauthenticated = try await client.call(.post, "/iid/v1:batchAdd", headers: [:], body: "{}")
            #expect(unauthenticated.status == .unauthorized)
            let auditor = try await client.call(
                .post, "/iid/v1:batchAdd", headers: TestServer.Client.auditor, body: "{}")
            #expect(auditor.status == .forbidden)
            #expect(auditor.text == #"{"error":"PERMISSION_DENIED"}"#)
        }
    }

    @Test("single relation and info with topics and add dates")
    func relationAndInfo() async throws {
        try await TestServer().run { client in
            let token = try await client.registerDevice(platform: "ios")
            let added = try await client.call(.post, "/iid/v1/\(token)/rel/topics/news", body: "")
            #expect(added.status == .ok)
            let info = try await client.call(.get, "/iid/info/\(token)?details=true")
            #expect(info.status == .ok)
            #expect(info.json["application"] as? String == "com.example.app")
            #expect(info.json["platform"] as? String == "IOS")
            let topics = (info.json["rel"] as? [String: Any])?["topics"] as? [String: [String: String]]
            #expect(topics?["news"]?["addDate"] == LedgerTime.now().date)
            let unknown = try await client.call(.get, "/iid/info/unknown-token")
            #expect(unknown.status == .notFound)
            #expect(unknown.text == #"{"error":"NOT_FOUND"}"#)
            let relateUnknown = try await client.call(.post, "/iid/v1/unknown-token/rel/topics/news", body: "")
            #expect(relateUnknown.status == .notFound)
        }
    }
}

@Suite("Device registration")
struct RegistrationTests {
    @Test("register with the client key, unregister, and a second unregister is 404")
    func lifecycle() async throws {
        try await TestServer().run { client in
            let token = try await client.registerDevice()
            #expect(token.count > 100)
            #expect(try RegistrationToken(token).rawValue == token)
            let other = try await client.registerDevice()
            #expect(other != token)
            let noKey = try await client.call(
                .post, "/v1/projects/demo-project/registrations", headers: [:], body: "{}")
            #expect(noKey.status == .unauthorized)
            let admin = try await client.call(.post, "/v1/projects/demo-project/registrations", body: "{}")
            #expect(admin.status == .forbidden)
            let deleted = try await client.call(
                .delete, "/v1/projects/demo-project/registrations/\(token)", headers: TestServer.Client.device)
            #expect(deleted.status == .ok)
            let again = try await client.call(
                .delete, "/v1/projects/demo-project/registrations/\(token)", headers: TestServer.Client.device)
            #expect(again.status == .notFound)
            let kinds = try client.events().map(\.kind)
            #expect(kinds == [.registered, .registered, .unregistered])
        }
    }
}
