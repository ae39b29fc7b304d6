import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import LedgerServer
import LedgerTestSupport
import Testing
import LedgerStore
import LedgerCore

/// `/console`, through the router: sign-in, the session cookie, the pages' headers and escaping, and the
/// message page's answer to "who received message X?".
@Suite("Audit console")
struct ConsoleTests {
    static let form: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]

    /// Signs in with `key`; the session cookie (`name=value`), or nil when refused.
    static func signIn(_ client: TestServer.Client, key: String) async throws -> (TestServer.Reply, String?) {
        let reply = try await client.call(.post, "/console/sign-in", headers: form, body: "key=\(key)")
        let cookie = reply.headers[.setCookie]?.split(separator: ";").first.map(String.init)
        return (reply, cookie)
    }

    static func get(_ client: TestServer.Client, _ uri: String, cookie: String) async throws -> TestServer.Reply {
        try await client.call(.get, uri, headers: [.cookie: cookie])
    }

    @Test(
        "the auditor and admin keys sign in to an HttpOnly, SameSite=Strict session; a device key and a wrong key do not"
    )
    func signIn() async throws {
        try await TestServer().run { client in
            let unsigned = try await client.call(.get, "/console", headers: [:])
            #expect(unsigned.status == .seeOther && unsigned.headers[.location] == "/console/sign-in")
            let page = try await client.call(.get, "/console/sign-in", headers: [:])
            #expect(page.status == .ok && page.text.contains(#"<form method="post" action="/console/sign-in""#))
            #expect(page.headers[.contentSecurityPolicy]?.hasPrefix("default-src 'self'") == true)

            for key in ["auditor", "owner"] {
                let (reply, cookie) = try await Self.signIn(client, key: key)
                #expect(reply.status == .seeOther && reply.headers[.location] == "/console")
                let setCookie = try #require(reply.headers[.setCookie])
                #expect(setCookie.contains("HttpOnly") && setCookie.contains("SameSite=Strict"))
                #expect(!setCookie.contains(key))
                let overview = try await Self.get(client, "/console", cookie: try #require(cookie))
                #expect(overview.status == .ok && overview.text.contains("Project demo-project"))
                #expect(!overview.text.contains(key == "owner" ? "owner" : "Bearer"))
            }
            for key in ["dev-client-key", "wrong"] {
                let (reply, cookie) = try await Self.signIn(client, key: key)
                #expect(reply.status == .unauthorized && cookie == nil)
                #expect(reply.text.contains("That key does not open the audit console."))
                #expect(!reply.text.contains(key))
            }
            // The last signed checkpoint, once there is one; looking never signs one.
            let (_, auditor) = try await Self.signIn(client, key: "auditor")
            let before = try await Self.get(client, "/console", cookie: try #require(auditor))
            #expect(before.text.contains("None yet"))
            #expect(try await Self.get(client, "/console", cookie: auditor!).text.contains("None yet"))
            let signed = try await client.call(.get, "/v1/projects/demo-project/ledger:checkpoint")
            #expect(signed.status == .ok)
            let after = try await Self.get(client, "/console", cookie: auditor!)
            #expect(after.text.contains("topicledger/demo-project") && !after.text.contains("None yet"))
            // A made-up session is no session; signing out ends a real one.
            #expect(try await Self.get(client, "/console", cookie: "tl_console=forged").status == .seeOther)
            let (_, cookie) = try await Self.signIn(client, key: "auditor")
            let out = try await client.call(.post, "/console/sign-out", headers: [.cookie: try #require(cookie)])
            #expect(out.status == .seeOther && out.headers[.setCookie]?.contains("Max-Age=0") == true)
            #expect(try await Self.get(client, "/console", cookie: cookie!).status == .seeOther)
        }
    }

    @Test(
        "a condition message's page shows the recipients of its send time, the matching digests and acknowledgements; its CSV is ledger replay's"
    )
    func messagePage() async throws {
        let server = TestServer()
        try await server.run { client in
            var tokens: [String] = []
            for _ in 0..<3 { tokens.append(try await client.registerDevice()) }
            let admin = TestServer.Client.admin
            func batch(_ action: String, _ topic: String, _ members: [String]) async throws {
                let list = members.map { "\"\($0)\"" }.joined(separator: ",")
                let reply = try await client.call(
                    .post, "/iid/v1:\(action)", headers: admin,
                    body: #"{"to":"/topics/\#(topic)","registration_tokens":[\#(list)]}"#)
                #expect(reply.status == .ok)
            }
            try await batch("batchAdd", "A", tokens)
            try await batch("batchAdd", "B", [tokens[0]])
            try await batch("batchAdd", "C", [tokens[1]])
            let sent = try await client.call(
                .post, "/v1/projects/demo-project/messages:send", headers: admin,
                body:
                    #"{"message":{"condition":"'A' in topics && ('B' in topics || 'C' in topics)","data":{"note":"<script>alert(1)</script>"}}}"#
            )
            let id = try #require((sent.json["name"] as? String)?.split(separator: "/").last.map(String.init))
            // Later changes: the third device joins B, the first leaves A. The page must not follow them.
            try await batch("batchAdd", "B", [tokens[2]])
            try await batch("batchRemove", "A", [tokens[0]])
            // The first device acknowledges everything it has.
            let inbox = try await client.call(
                .get, "/v1/projects/demo-project/registrations/\(tokens[0])/messages", headers: TestServer.Client.device
            )
            let cursor = try #require(inbox.json["cursor"] as? String)
            _ = try await client.call(
                .post, "/v1/projects/demo-project/registrations/\(tokens[0])/messages:ack",
                headers: TestServer.Client.device, body: #"{"through":"\#(cursor)"}"#)
            _ = try await client.headSeq()  // audiences recorded

            let (_, cookie) = try await Self.signIn(client, key: "auditor")
            let page = try await Self.get(client, "/console/messages/\(id)", cookie: try #require(cookie))
            #expect(page.status == .ok)
            let expected = [tokens[0], tokens[1]].sorted()
            for token in expected { #expect(page.text.contains(token)) }
            #expect(!page.text.contains(tokens[2]))
            #expect(page.text.contains(#"class="badge ok""#))
            #expect(page.text.contains("1 of 2"))
            let digest = deviceDigestHex([1, 2])  // the first two registered devices
            #expect(page.text.components(separatedBy: digest).count == 3, "replayed and recorded digest both shown")
            // User input is text, never markup.
            #expect(page.text.contains("&lt;script&gt;alert(1)&lt;/script&gt;"))
            #expect(!page.text.contains("<script>"))

            let csv = try await Self.get(client, "/console/messages/\(id)/recipients.csv", cookie: cookie!)
            #expect(csv.headers[.contentType]?.hasPrefix("text/csv") == true)
            let cli = try await runProduct(
                "ledger", ["replay", "--data", server.directory.path, "--message", id, "--format", "csv"])
            #expect(cli.status == 0)
            #expect(csv.text == cli.stdout)
            #expect(
                csv.text == "token,device\n" + expected.map { "\($0),\(tokens.firstIndex(of: $0)! + 1)\n" }.joined())

            let missing = try await Self.get(client, "/console/messages/12345", cookie: cookie!)
            #expect(missing.status == .notFound && missing.text.contains("There is no message 12345"))
        }
    }

    @Test("the message list is newest first, filtered by target and time, and pages with a link")
    func messageList() async throws {
        try await TestServer().run { client in
            var ids: [String] = []
            for index in 0..<53 {
                let topic = index % 2 == 0 ? "even" : "odd<b>"
                let reply = try await client.call(
                    .post, "/v1/projects/demo-project/messages:send", headers: TestServer.Client.admin,
                    body: #"{"message":{"topic":"\#(topic == "even" ? "even" : "odd")","data":{"i":"\#(index)"}}}"#)
                ids.append(try #require((reply.json["name"] as? String)?.split(separator: "/").last.map(String.init)))
            }
            let (_, cookie) = try await Self.signIn(client, key: "auditor")
            let first = try await Self.get(client, "/console/messages", cookie: try #require(cookie))
            #expect(first.status == .ok)
            let shown = Self.messageIDs(first.text)
            #expect(shown == Array(ids.reversed().prefix(50)))
            let next = try #require(Self.nextLink(first.text))
            let second = try await Self.get(client, next, cookie: cookie!)
            #expect(Self.messageIDs(second.text) == Array(ids.prefix(3).reversed()))
            #expect(Self.nextLink(second.text) == nil)

            let odd = try await Self.get(client, "/console/messages?target=odd", cookie: cookie!)
            #expect(
                Self.messageIDs(odd.text) == ids.enumerated().filter { $0.offset % 2 == 1 }.map(\.element).reversed())
            let future = try await Self.get(client, "/console/messages?from=2999-01-01", cookie: cookie!)
            #expect(Self.messageIDs(future.text).isEmpty && future.text.contains("No messages here."))
            let bad = try await Self.get(client, "/console/messages?from=yesterday", cookie: cookie!)
            #expect(bad.status == .badRequest && bad.text.contains("RFC 3339"))
        }
    }

    @Test(
        "a device page: a hostile app id as text, topics at a past time, its history, deliveries and acknowledgements")
    func devicePage() async throws {
        try await TestServer().run { client in
            let hostile = "<script>alert(1)</script>"
            let registered = try await client.call(
                .post, "/v1/projects/demo-project/registrations", headers: TestServer.Client.device,
                body: #"{"platform":"ios","appId":"\#(hostile)"}"#)
            let token = try #require(registered.json["token"] as? String)
            let admin = TestServer.Client.admin
            _ = try await client.call(
                .post, "/iid/v1:batchAdd", headers: admin,
                body: #"{"to":"/topics/early","registration_tokens":["\#(token)"]}"#)
            let sent = try await client.call(
                .post, "/v1/projects/demo-project/messages:send", headers: admin,
                body: #"{"message":{"topic":"early"}}"#)
            let id = try #require((sent.json["name"] as? String)?.split(separator: "/").last.map(String.init))
            let between = try await client.events().last!.time
            try await Task.sleep(for: .milliseconds(5))
            _ = try await client.call(
                .post, "/iid/v1:batchRemove", headers: admin,
                body: #"{"to":"/topics/early","registration_tokens":["\#(token)"]}"#)
            _ = try await client.call(
                .post, "/iid/v1:batchAdd", headers: admin,
                body: #"{"to":"/topics/late","registration_tokens":["\#(token)"]}"#)

            let (_, cookie) = try await Self.signIn(client, key: "auditor")
            let now = try await Self.get(client, "/console/devices?token=\(token)", cookie: try #require(cookie))
            #expect(now.status == .ok)
            #expect(now.text.contains("&lt;script&gt;alert(1)&lt;/script&gt;") && !now.text.contains(hostile))
            #expect(now.text.contains(#"<a href="/console/topics/late">late</a>"#))
            #expect(!now.text.contains(#"<a href="/console/topics/early">"#))
            #expect(now.text.contains("still subscribed") && now.text.contains("<code>early</code>"))
            #expect(now.text.contains(#"<a href="/console/messages/\#(id)">"#) && now.text.contains("not yet"))
            let past = try await Self.get(client, "/console/devices?token=\(token)&at=\(between)", cookie: cookie!)
            #expect(past.text.contains(#"<a href="/console/topics/early">early</a>"#))
            #expect(!past.text.contains(#"<a href="/console/topics/late">"#))
            let other = (token.first == "c" ? "d" : "c") + token.dropFirst()
            let unknown = try await Self.get(client, "/console/devices?token=\(other)", cookie: cookie!)
            #expect(unknown.status == .notFound && unknown.text.contains("No device with that token"))
            let bad = try await Self.get(client, "/console/devices?token=\(token)&at=soon", cookie: cookie!)
            #expect(bad.status == .badRequest)
        }
    }

    @Test(
        "topics sort by name or subscribers; a topic's members page through registration order at any time, with its chart"
    )
    func topicPages() async throws {
        let server = TestServer { $0.registrationsPerSecond = 10_000 }
        try await server.run { client in
            var tokens: [String] = []
            for _ in 0..<130 { tokens.append(try await client.registerDevice()) }
            let admin = TestServer.Client.admin
            func add(_ topic: String, _ members: ArraySlice<String>) async throws {
                let list = members.map { "\"\($0)\"" }.joined(separator: ",")
                let reply = try await client.call(
                    .post, "/iid/v1:batchAdd", headers: admin,
                    body: #"{"to":"/topics/\#(topic)","registration_tokens":[\#(list)]}"#)
                #expect(reply.status == .ok)
            }
            try await add("big", tokens[0..<20])
            let early = try await client.events().last!.time
            try await Task.sleep(for: .milliseconds(5))
            try await add("big", tokens[20..<130])
            try await add("a-small", tokens[0..<2])

            let (_, cookie) = try await Self.signIn(client, key: "auditor")
            let byName = try await Self.get(client, "/console/topics", cookie: try #require(cookie))
            #expect(byName.text.range(of: "a-small")!.lowerBound < byName.text.range(of: ">big<")!.lowerBound)
            let bySize = try await Self.get(client, "/console/topics?order=subscribers", cookie: cookie!)
            #expect(bySize.text.range(of: ">big<")!.lowerBound < bySize.text.range(of: "a-small")!.lowerBound)

            let first = try await Self.get(client, "/console/topics/big", cookie: cookie!)
            #expect(first.status == .ok && first.text.contains("130 members"))
            #expect(first.text.contains("<svg") && first.text.contains("<polyline"))
            let firstPage = Self.memberTokens(first.text)
            #expect(firstPage == Array(tokens.prefix(100)))
            let next = try #require(Self.nextLink(first.text))
            let second = try await Self.get(client, next, cookie: cookie!)
            #expect(Self.memberTokens(second.text) == Array(tokens[100..<130]))
            let then = try await Self.get(client, "/console/topics/big?at=\(early)", cookie: cookie!)
            #expect(then.text.contains("20 members") && Self.memberTokens(then.text) == Array(tokens.prefix(20)))
            #expect(try await Self.get(client, "/console/topics/nothing", cookie: cookie!).status == .notFound)
        }
    }

    @Test("the log: events in order with hash and previous hash, filtered by kind, token and seq, paged")
    func logPage() async throws {
        try await TestServer().run { client in
            var tokens: [String] = []
            for _ in 0..<3 { tokens.append(try await client.registerDevice()) }
            for token in tokens {
                _ = try await client.call(
                    .post, "/iid/v1:batchAdd", headers: TestServer.Client.admin,
                    body: #"{"to":"/topics/news","registration_tokens":["\#(token)"]}"#)
            }
            let events = try await client.events()
            let (_, cookie) = try await Self.signIn(client, key: "auditor")
            let all = try await Self.get(client, "/console/log", cookie: try #require(cookie))
            #expect(all.status == .ok)
            #expect(Self.logSeqs(all.text) == events.map(\.seq))
            let subscribed = try await Self.get(client, "/console/log?kind=subscribed", cookie: cookie!)
            #expect(Self.logSeqs(subscribed.text) == events.filter { $0.kind == .subscribed }.map(\.seq))
            let one = try await Self.get(client, "/console/log?token=\(tokens[1])", cookie: cookie!)
            #expect(Self.logSeqs(one.text).count == 2)
            let range = try await Self.get(client, "/console/log?from=2&to=3", cookie: cookie!)
            #expect(Self.logSeqs(range.text) == [2, 3])
            // The hash chain is on the page: each event's previous hash is the hash before it.
            let ledger = try await client.ledgers.ledger(for: .default)
            var hashes: [String] = []
            try ledger.readLog { snapshot in
                try snapshot.forEachChainedEvent(from: 1) { _, _, hash in
                    hashes.append(Self.hashString(hash))
                    return true
                }
            }
            for hash in hashes { #expect(all.text.contains(hash)) }
            #expect(try await Self.get(client, "/console/log?from=0", cookie: cookie!).status == .badRequest)
            #expect(try await Self.get(client, "/console/log?kind=nope", cookie: cookie!).status == .badRequest)
        }
    }

    static func hashString(_ bytes: UnsafeRawBufferPointer) -> String {
        bytes.map { String(format: "%02x", $0) }.joined()
    }

    static func logSeqs(_ html: String) -> [UInt64] {
        html.components(separatedBy: #"<tr><td class="num">"#).dropFirst().compactMap {
            $0.split(separator: "<").first.flatMap { UInt64($0) }
        }
    }

    static func memberTokens(_ html: String) -> [String] {
        html.components(separatedBy: #"<a href="/console/devices?token="#).dropFirst().compactMap {
            $0.split(separator: "\"").first.map(String.init)
        }
    }

    static func messageIDs(_ html: String) -> [String] {
        html.components(separatedBy: #"<a href="/console/messages/"#).dropFirst().compactMap {
            $0.split(separator: "\"").first.map(String.init)
        }
    }

    static func nextLink(_ html: String) -> String? {
        guard let range = html.range(of: #"<a rel="next" href=""#) else { return nil }
        let rest = html[range.upperBound...]
        return rest.split(separator: "\"").first.map { $0.replacingOccurrences(of: "&amp;", with: "&") }
    }
}
