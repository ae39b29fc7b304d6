import Foundation
import HTTPTypes
import LedgerCore
import LedgerServer
import Testing
import LedgerStore

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
            let before = try await client.headSeq()
            let again = try await client.call(.post, base(token) + "?topicName=news", body: "{}")
            #expect(again.status == .conflict)
            #expect(again.googleStatus == "ALREADY_EXISTS")
            #expect(try await client.headSeq() == before)
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
            let vias = try await client.events().compactMap { event -> SubscriptionChannel? in
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
            let before = try await client.headSeq()
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
            #expect(try await client.headSeq() == before)
        }
    }

    @Test("the topic limit per instance: the next subscription is 400 TOO_MANY_TOPICS")
    func topicLimit() async throws {
        try await TestServer(configure: { $0.limits.maximumTopicsPerInstance = 3 }).run { client in
            let token = try await client.registerDevice()
            for topic in ["a", "b", "c"] {
                #expect(try await client.call(.post, base(token) + "?topicName=\(topic)", body: "{}").status == .ok)
            }
            let before = try await client.headSeq()
            let refused = try await client.call(.post, base(token) + "?topicName=d", body: "{}")
            #expect(refused.status == .badRequest)
            #expect(refused.errorCode == "TOO_MANY_TOPICS")
            #expect(try await client.headSeq() == before)
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

    @Test("the project's topics, paged, by name or by subscriber count")
    func topicListing() async throws {
        try await TestServer().run { client in
            var tokens: [String] = []
            for _ in 0..<3 { tokens.append(try await client.registerDevice()) }
            // b.x: 3 subscribers, c: 2, a: 1, d: none any more (a dot in a name survives the page token).
            for (topic, count) in [("a", 1), ("b.x", 3), ("c", 2), ("d", 1)] {
                for token in tokens.prefix(count) {
                    _ = try await client.call(.post, base(token) + "?topicName=\(topic)", body: "{}")
                }
            }
            _ = try await client.call(.delete, base(tokens[0]) + "/d")
            func list(_ query: String) async throws -> (names: [String], counts: [Int], next: String?) {
                var names: [String] = []
                var counts: [Int] = []
                var pageToken: String?
                repeat {
                    let reply = try await client.call(
                        .get,
                        "/v1/projects/demo-project/topics?pageSize=2\(query)"
                            + (pageToken.map {
                                "&pageToken=\($0.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)"
                            } ?? ""),
                        headers: TestServer.Client.auditor)
                    #expect(reply.status == .ok, "\(reply.text)")
                    let page = reply.json["topics"] as? [[String: Any]] ?? []
                    #expect(page.count <= 2)
                    names += page.compactMap { $0["name"] as? String }
                    counts += page.compactMap { $0["subscriberCount"] as? Int }
                    pageToken = reply.json["nextPageToken"] as? String
                } while pageToken != nil && names.count < 10
                return (names, counts, pageToken)
            }
            let byName = try await list("")
            #expect(byName.names == ["a", "b.x", "c", "d"] && byName.counts == [1, 3, 2, 0])
            let byCount = try await list("&orderBy=subscriberCount%20desc")
            #expect(byCount.names == ["b.x", "c", "a", "d"] && byCount.counts == [3, 2, 1, 0])
            // Without pageSize: the first 1,000 (here all), no next page.
            let all = try await client.call(.get, "/v1/projects/demo-project/topics")
            #expect((all.json["topics"] as? [Any])?.count == 4 && all.json["nextPageToken"] == nil)
            for query in ["orderBy=size", "pageToken=nonsense", "pageToken=1.bad%20name", "pageSize=0"] {
                let bad = try await client.call(.get, "/v1/projects/demo-project/topics?\(query)")
                #expect(bad.status == .badRequest && bad.errorCode == "INVALID_ARGUMENT", "\(query)")
            }
        }
    }

    @Test("a device manages its own subscriptions with its client key (via client)")
    func deviceSelfService() async throws {
        try await TestServer().run { client in
            let token = try await client.registerDevice()
            let reply = try await client.call(
                .post, base(token) + "?topicName=weather", headers: TestServer.Client.device, body: "{}")
            #expect(reply.status == .ok)
            guard case .subscribed(_, _, let via) = try await client.events().last?.body else {
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
            let all = try await client.events()
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
            #expect(try await client.headSeq() == 0)
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
            // The auditor reads it too (and may not write through Instance ID); a device key may not read it.
            let audited = try await client.call(
                .get, "/iid/info/\(token)?details=true", headers: TestServer.Client.auditor)
            #expect(audited.status == .ok && audited.text == info.text)
            let auditorWrite = try await client.call(
                .post, "/iid/v1/\(token)/rel/topics/sports", headers: TestServer.Client.auditor, body: "")
            #expect(auditorWrite.status == .forbidden)
            let device = try await client.call(.get, "/iid/info/\(token)", headers: TestServer.Client.device)
            #expect(device.status == .unauthorized)
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
            let kinds = try await client.events().map(\.kind)
            #expect(kinds == [.registered, .registered, .unregistered])
        }
    }
}
