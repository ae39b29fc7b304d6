import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import LedgerCore
import LedgerServer
import LedgerStore
import LedgerTestSupport
import Testing

@Suite("Delivery")
struct DeliveryTests {
    static let send = "/v1/projects/demo-project/messages:send"

    static func registrations(_ token: String) -> String { "/v1/projects/demo-project/registrations/\(token)" }

    /// Subscribes `token` to `topic` through the v1 API.
    static func subscribe(_ client: TestServer.Client, _ token: String, _ topic: String) async throws {
        let reply = try await client.call(
            .post, registrations(token) + "/topicSubscriptions?topicName=\(topic)", body: "{}")
        #expect(reply.status == .ok)
    }

    /// Sends `message` (JSON) and returns the message id.
    static func send(_ client: TestServer.Client, _ message: String) async throws -> String {
        let reply = try await client.call(.post, send, body: #"{"message":\#(message)}"#)
        #expect(reply.status == .ok, "\(reply.text)")
        return String((reply.json["name"] as? String)?.split(separator: "/").last ?? "")
    }

    static func poll(_ client: TestServer.Client, _ token: String, query: String = "") async throws -> TestServer.Reply
    {
        try await client.call(.get, registrations(token) + "/messages" + query, headers: TestServer.Client.device)
    }

    static func ids(_ reply: TestServer.Reply) -> [String] {
        (reply.json["messages"] as? [[String: Any]])?.compactMap { $0["messageId"] as? String } ?? []
    }

    @Test("issued tokens are unique, FCM-shaped, and start with c–f, never with '-' (an option to a CLI)")
    func issuedTokens() {
        let tokens = (0..<5000).map { _ in RegistrationToken.issue().rawValue }
        #expect(Set(tokens).count == tokens.count)
        for token in tokens {
            #expect("cdef".contains(token.first!), "\(token.prefix(1))")
            #expect(token.contains(":APA91b"))
        }
        // All four first letters occur, so the prefix keeps the rest of the first byte random.
        #expect(Set(tokens.map(\.first!)) == Set("cdef"))
    }

    @Test("a device receives the topic, condition and token messages it is in the audience of, and no others")
    func audienceOnly() async throws {
        try await TestServer().run { client in
            let alice = try await client.registerDevice(), bob = try await client.registerDevice()
            try await Self.subscribe(client, alice, "TopicA")
            try await Self.subscribe(client, alice, "TopicB")
            try await Self.subscribe(client, bob, "TopicA")
            try await Self.subscribe(client, bob, "weather")
            let toWeather = try await Self.send(
                client, #"{"topic":"weather","notification":{"title":"Rain","body":"Soon"},"data":{"k":"v"}}"#)
            let toCondition = try await Self.send(
                client, #"{"condition":"'TopicA' in topics && ('TopicB' in topics || 'TopicC' in topics)"}"#)
            let toAlice = try await Self.send(client, #"{"token":"\#(alice)","data":{"only":"alice"}}"#)
            let toNobody = try await Self.send(client, #"{"topic":"nobody-here"}"#)
            let aliceInbox = try await Self.poll(client, alice)
            #expect(Self.ids(aliceInbox) == [toCondition, toAlice])
            let bobInbox = try await Self.poll(client, bob)
            #expect(Self.ids(bobInbox) == [toWeather])
            #expect(!Self.ids(aliceInbox).contains(toNobody) && !Self.ids(bobInbox).contains(toNobody))
            // What an iOS app gets in didReceiveRemoteNotification.
            let delivered = try #require((bobInbox.json["messages"] as? [[String: Any]])?.first)
            let payload = try #require(delivered["payload"] as? [String: Any])
            #expect(payload["gcm.message_id"] as? String == toWeather)
            #expect(payload["from"] as? String == "/topics/weather")
            #expect(payload["k"] as? String == "v")
            #expect(
                (payload["aps"] as? [String: Any])?["alert"] as? [String: String] == ["title": "Rain", "body": "Soon"])
            let direct = try #require(
                (aliceInbox.json["messages"] as? [[String: Any]])?.last?["payload"] as? [String: Any])
            #expect(direct["from"] as? String == "demo-project" && direct["only"] as? String == "alice")
        }
    }

    @Test("at-least-once: unacknowledged messages come again, acknowledged ones never; an ack is an event")
    func acknowledgement() async throws {
        try await TestServer().run { client in
            let device = try await client.registerDevice()
            try await Self.subscribe(client, device, "news")
            let first = try await Self.send(client, #"{"topic":"news"}"#)
            let second = try await Self.send(client, #"{"topic":"news"}"#)
            let inbox = try await Self.poll(client, device)
            #expect(Self.ids(inbox) == [first, second])
            #expect(Self.ids(try await Self.poll(client, device)) == [first, second])  // not acked: again
            let cursors = (inbox.json["messages"] as? [[String: Any]])?.compactMap { $0["cursor"] as? String } ?? []
            let ack = try await client.call(
                .post, Self.registrations(device) + "/messages:ack", headers: TestServer.Client.device,
                body: #"{"through":"\#(cursors[0])"}"#)
            #expect(ack.status == .ok && ack.json["acknowledgedThrough"] as? String == cursors[0])
            #expect(Self.ids(try await Self.poll(client, device)) == [second])
            // The auditor sees both deliveries, the first acknowledged (a send to sports did not reach it).
            _ = try await Self.send(client, #"{"topic":"sports"}"#)
            let audit = try await client.call(
                .get, "/v1/projects/demo-project/audit/instances/\(device)", headers: TestServer.Client.auditor)
            let deliveries = audit.json["deliveries"] as? [[String: Any]] ?? []
            #expect(deliveries.map { $0["messageId"] as? String } == [first, second], "\(audit.text)")
            #expect(deliveries.map { $0["acknowledged"] as? Bool } == [true, false])
            #expect(deliveries.map { ($0["target"] as? [String: String])?["topic"] } == ["news", "news"])
            #expect(deliveries.map { String($0["seq"] as? Int ?? 0) } == cursors)
            #expect(String(audit.json["acknowledgedThroughSeq"] as? Int ?? 0) == cursors[0])
            // `after` reads past what the device has seen without acknowledging it.
            #expect(Self.ids(try await Self.poll(client, device, query: "?after=\(cursors[1])")).isEmpty)
            _ = try await client.call(
                .post, Self.registrations(device) + "/messages:ack", headers: TestServer.Client.device,
                body: #"{"through":"\#(cursors[1])"}"#)
            #expect(Self.ids(try await Self.poll(client, device)).isEmpty)
            // An older cursor changes nothing and appends nothing.
            let before = try await client.headSeq()
            let stale = try await client.call(
                .post, Self.registrations(device) + "/messages:ack", headers: TestServer.Client.device,
                body: #"{"through":"1"}"#)
            #expect(stale.json["acknowledgedThrough"] as? String == cursors[1])
            let after = try await client.headSeq()
            #expect(after == before)
            let acks = try await client.events().filter { $0.kind == .acknowledged }
            #expect(acks.map(\.actor) == ["device", "device"])
            let numeric = [#"{"through":1.5}"#, #"{"through":1}"#, #"{"through":"1.5"}"#, #"{"through":"-1"}"#]
            for body in numeric + [
                #"{"through":"x"}"#, #"{"through":true}"#, #"{"through":"99999"}"#, #"{"cursor":"1"}"#, "{",
            ] {
                let bad = try await client.call(
                    .post, Self.registrations(device) + "/messages:ack", headers: TestServer.Client.device, body: body)
                #expect(bad.status == .badRequest, "\(body)")
            }
            #expect(try await client.headSeq() == before)
        }
    }

    @Test("a long poll is woken by a send at once; a device offline during sends gets them on return")
    func longPoll() async throws {
        try await TestServer().run { client in
            let device = try await client.registerDevice()
            try await Self.subscribe(client, device, "live")
            let started = ContinuousClock.now
            async let waited = Self.poll(client, device, query: "?waitSeconds=30")
            try await Task.sleep(for: .milliseconds(200))
            let id = try await Self.send(client, #"{"topic":"live"}"#)
            let reply = try await waited
            #expect(Self.ids(reply) == [id])
            #expect(ContinuousClock.now - started < .seconds(10))
            // Nothing new: a short wait returns empty with the cursor unchanged.
            let cursor = try #require(reply.json["cursor"] as? String)
            let empty = try await Self.poll(client, device, query: "?after=\(cursor)&waitSeconds=1")
            #expect(Self.ids(empty).isEmpty && empty.json["cursor"] as? String == cursor)
            let bad = try await Self.poll(client, device, query: "?waitSeconds=-1")
            #expect(bad.status == .badRequest)
        }
    }

    @Test("expired messages are skipped: apns-expiration for iOS, android.ttl for Android, the TTL header for the web")
    func expiry() async throws {
        try await TestServer().run { client in
            let ios = try await client.registerDevice(platform: "ios")
            let android = try await client.registerDevice(platform: "android")
            for device in [ios, android] { try await Self.subscribe(client, device, "deals") }
            let expired = try await Self.send(
                client, #"{"topic":"deals","apns":{"headers":{"apns-expiration":"1"}},"android":{"ttl":"0s"}}"#)
            let live = try await Self.send(
                client,
                #"{"topic":"deals","apns":{"headers":{"apns-expiration":"4102444800"}},"android":{"ttl":"3600s"}}"#)
            let forIOSOnly = try await Self.send(client, #"{"topic":"deals","android":{"ttl":"0s"}}"#)
            #expect(Self.ids(try await Self.poll(client, ios)) == [live, forIOSOnly])
            #expect(Self.ids(try await Self.poll(client, android)) == [live])
            #expect(!Self.ids(try await Self.poll(client, ios)).contains(expired))
            // Header names in any case (HTTP's rule, and validation's); web devices honour the TTL header.
            let web = try await client.registerDevice(platform: "web")
            try await Self.subscribe(client, web, "flash")
            try await Self.subscribe(client, ios, "flash")
            _ = try await Self.send(
                client,
                #"{"topic":"flash","apns":{"headers":{"APNS-Expiration":"1"}},"webpush":{"headers":{"Ttl":"0"}}}"#)
            let lasting = try await Self.send(client, #"{"topic":"flash","webpush":{"headers":{"TTL":"3600"}}}"#)
            #expect(Self.ids(try await Self.poll(client, web)) == [lasting])
            #expect(Self.ids(try await Self.poll(client, ios)) == [live, forIOSOnly, lasting])
        }
    }

    @Test(
        "each platform gets its own payload and delivery attributes; a newer message with the same collapse key replaces an undelivered older one, pages later too"
    )
    func platformsAndCollapse() async throws {
        try await TestServer().run { client in
            let ios = try await client.registerDevice(platform: "ios")
            let android = try await client.registerDevice(platform: "android")
            let web = try await client.registerDevice(platform: "web")
            let unspecified = try await client.registerDevice()
            for device in [ios, android, web, unspecified] { try await Self.subscribe(client, device, "scores") }
            func scoreMessage(_ title: String) -> String {
                #"{"topic":"scores","notification":{"title":"\#(title)"},"apns":{"headers":{"apns-collapse-id":"score","apns-priority":"5"},"payload":{"aps":{"badge":2}}},"android":{"collapse_key":"score","priority":"high"},"webpush":{"headers":{"Topic":"score"}}}"#
            }
            let first = try await Self.send(client, scoreMessage("1-0"))
            func only(_ device: String) async throws -> [String: Any] {
                let messages = try await Self.poll(client, device).json["messages"] as? [[String: Any]]
                #expect(messages?.count == 1)
                return messages?.first ?? [:]
            }
            let onIOS = try await only(ios)
            #expect(onIOS["messageId"] as? String == first)
            #expect(onIOS["collapseKey"] as? String == "score")
            #expect(onIOS["priority"] as? String == "normal")
            #expect(onIOS["pushType"] as? String == "alert")
            let aps = (onIOS["payload"] as? [String: Any])?["aps"] as? [String: Any]
            #expect(aps?["badge"] as? Int == 2)
            #expect((aps?["alert"] as? [String: Any])?["title"] as? String == "1-0")
            let onAndroid = try await only(android)
            #expect(onAndroid["priority"] as? String == "high")
            #expect(onAndroid["pushType"] == nil)
            let androidPayload = onAndroid["payload"] as? [String: Any]
            #expect((androidPayload?["notification"] as? [String: Any])?["title"] as? String == "1-0")
            #expect(androidPayload?["collapseKey"] as? String == "score")
            let onWeb = try await only(web)
            #expect(onWeb["priority"] as? String == "normal")
            #expect(
                ((onWeb["payload"] as? [String: Any])?["notification"] as? [String: Any])?["title"] as? String == "1-0")
            #expect(
                (try await only(unspecified)["payload"] as? [String: Any])?["aps"] != nil, "no platform: the iOS shape")

            // 100 more sends, then a newer score: the first is replaced although the newer one is a page later.
            var fillers: [String] = []
            for index in 0..<100 {
                fillers.append(try await Self.send(client, #"{"topic":"scores","data":{"n":"\#(index)"}}"#))
            }
            let newer = try await Self.send(client, scoreMessage("2-0"))
            for device in [ios, android, web] {
                var received: [String] = []
                var cursor = "0"
                while true {
                    let page = try await Self.poll(client, device, query: "?after=\(cursor)")
                    let ids = Self.ids(page)
                    if ids.isEmpty { break }
                    received += ids
                    cursor = try #require(page.json["cursor"] as? String)
                }
                #expect(received == fillers + [newer], "\(received.first ?? "-") … \(received.count) messages")
            }
        }
    }

    @Test("unregistered devices get 404; other projects' keys 403; no key 401; one device never sees another's")
    func isolation() async throws {
        try await TestServer().run { client in
            let device = try await client.registerDevice(), other = try await client.registerDevice()
            _ = try await Self.send(client, #"{"token":"\#(other)"}"#)
            #expect(Self.ids(try await Self.poll(client, device)).isEmpty)
            let gone = try await client.call(.delete, Self.registrations(device), headers: TestServer.Client.device)
            #expect(gone.status == .ok)
            #expect(try await Self.poll(client, device).status == .notFound)
            let unknown = try await Self.poll(client, "never-registered")
            #expect(unknown.status == .notFound)
            let noKey = try await client.call(.get, Self.registrations(other) + "/messages", headers: [:])
            #expect(noKey.status == .unauthorized)
            let admin = try await client.call(.get, Self.registrations(other) + "/messages")
            #expect(admin.status == .forbidden)
            let otherProject = try await client.call(
                .get, "/v1/projects/another-project/registrations/\(other)/messages", headers: TestServer.Client.device)
            #expect(otherProject.status == .forbidden)
        }
    }

    @Test("Server-Sent Events over a socket: ids are cursors; Last-Event-ID resumes without loss or duplicates")
    func serverSentEvents() async throws {
        let directory = TemporaryDirectory("ledger-sse")
        defer { directory.remove() }
        var configuration = ServerConfiguration.development
        configuration.dataDirectory = directory.path
        configuration.port = 0
        let ledgers = try LedgerRegistry(configuration: configuration, logger: quietLogger)
        defer { ledgers.closeAll() }
        let app = buildApplication(configuration: configuration, ledgers: ledgers, logger: quietLogger)
        try await app.test(.live) { client in
            let port = try #require(client.port)
            let device: HTTPFields = [HTTPField.Name("x-goog-api-key")!: "dev-client-key"]
            let admin: HTTPFields = [.authorization: "Bearer owner"]
            let registered = try await client.execute(
                uri: "/v1/projects/demo-project/registrations", method: .post, headers: device,
                body: ByteBuffer(string: "{}"))
            let token = try #require(
                (try JSONSerialization.jsonObject(with: Data(registered.body.readableBytesView)) as? [String: Any])?[
                    "token"] as? String)
            _ = try await client.execute(
                uri: "/iid/v1/\(token)/rel/topics/sse", method: .post, headers: admin, body: nil)
            func send(_ n: Int) async throws {
                let reply = try await client.execute(
                    uri: "/v1/projects/demo-project/messages:send", method: .post, headers: admin,
                    body: ByteBuffer(string: #"{"message":{"topic":"sse","data":{"n":"\#(n)"}}}"#))
                #expect(reply.status == .ok)
            }
            try await send(1)
            let path = "/v1/projects/demo-project/registrations/\(token)/messages:stream"
            let stream = try SSEReader(port: port, path: path, headers: ["x-goog-api-key": "dev-client-key"])
            let backlog = await stream.events(count: 1, timeout: 10)
            #expect(stream.status == 200)
            #expect(backlog.count == 1)
            // Sent while connected: pushed without polling.
            try await send(2)
            let live = await stream.events(count: 2, timeout: 10)
            #expect(live.count == 2)
            func numbers(_ events: [SSEReader.Event]) -> [String?] {
                events.map { event in
                    ((try? JSONSerialization.jsonObject(with: Data(event.data.utf8))) as? [String: Any])
                        .flatMap { ($0["payload"] as? [String: Any])?["n"] as? String }
                }
            }
            #expect(numbers(live) == ["1", "2"])
            // Reconnect from the first id while message 3 is sent in between: 2 and 3 come, 1 does not.
            try await send(3)
            let resumed = try SSEReader(
                port: port, path: path, headers: ["x-goog-api-key": "dev-client-key", "Last-Event-ID": live[0].id])
            let rest = await resumed.events(count: 2, timeout: 10)
            #expect(numbers(rest) == ["2", "3"] && rest.first?.id == live[1].id)
            #expect(!rest.map(\.id).contains(live[0].id))
            // Acknowledge through 2: a fresh connection without Last-Event-ID starts after it.
            _ = try await client.execute(
                uri: "/v1/projects/demo-project/registrations/\(token)/messages:ack", method: .post, headers: device,
                body: ByteBuffer(string: #"{"through":"\#(live[1].id)"}"#))
            let fresh = try SSEReader(port: port, path: path, headers: ["x-goog-api-key": "dev-client-key"])
            let freshEvents = await fresh.events(count: 1, timeout: 10)
            #expect(freshEvents.map(\.id) == [rest[1].id])
            // Unregistering ends the device's stream and its waiting long poll at once, not at the next
            // keep-alive (15 s) or the poll's deadline (30 s).
            #expect(!fresh.ended)
            let poll = try SSEReader(
                port: port,
                path: "/v1/projects/demo-project/registrations/\(token)/messages?after=\(rest[1].id)"
                    + "&waitSeconds=30", headers: ["x-goog-api-key": "dev-client-key"])
            #expect(await poll.responseStatus(timeout: 0.5) == 0)  // waiting: nothing for it yet
            let deleted = try await client.execute(
                uri: "/v1/projects/demo-project/registrations/\(token)", method: .delete, headers: device)
            #expect(deleted.status == .ok)
            #expect(await fresh.end(timeout: 5), "the stream outlived its registration")
            #expect(await poll.responseStatus(timeout: 5) == 404, "the long poll outlived its registration")
        }
    }

    @Test("a backlog of several pages arrives complete, in order and once, over SSE and over paging long polls")
    func backlogOfSeveralPages() async throws {
        let directory = TemporaryDirectory("ledger-sse-backlog")
        defer { directory.remove() }
        var configuration = ServerConfiguration.development
        configuration.dataDirectory = directory.path
        configuration.port = 0
        let ledgers = try LedgerRegistry(configuration: configuration, logger: quietLogger)
        defer { ledgers.closeAll() }
        let app = buildApplication(configuration: configuration, ledgers: ledgers, logger: quietLogger)
        try await app.test(.live) { client in
            let port = try #require(client.port)
            let server = TestServer.Client(client: client, ledgers: ledgers)
            let token = try await server.registerDevice()
            try await Self.subscribe(server, token, "backlog")
            let pageSize = 100  // the server's page of messages (DeliveryRoutes.pageSize)
            let count = 2 * pageSize + 37
            var ids: [String] = []
            for n in 0..<count {
                ids.append(
                    try await Self.send(
                        server,
                        #"{"topic":"backlog","data":{"n":"\#(n)","quote":"\"é\n"},"notification":{"title":"t\#(n)"}}"#))
            }
            // Long polls, paging with the cursor: every message once, in order.
            var polled: [[String: Any]] = []
            var cursor = "0"
            while true {
                let page = try await Self.poll(server, token, query: "?after=\(cursor)")
                let messages = try #require(page.json["messages"] as? [[String: Any]])
                #expect(messages.count <= pageSize)
                if messages.isEmpty { break }
                polled += messages
                cursor = try #require(page.json["cursor"] as? String)
            }
            #expect(polled.compactMap { $0["messageId"] as? String } == ids)
            // The stream sends the same backlog, message for message, with the same JSON.
            let stream = try SSEReader(
                port: port, path: Self.registrations(token) + "/messages:stream",
                headers: ["x-goog-api-key": "dev-client-key"])
            let events = await stream.events(count: count, timeout: 30)
            #expect(events.count == count)
            for (n, (event, message)) in zip(events, polled).enumerated() {
                let streamed = try #require(
                    try JSONSerialization.jsonObject(with: Data(event.data.utf8)) as? [String: Any])
                #expect(NSDictionary(dictionary: streamed).isEqual(to: message), "message \(n)")
                #expect(event.id == message["cursor"] as? String)
                let payload = try #require(streamed["payload"] as? [String: Any])
                #expect(payload["n"] as? String == String(n))
                #expect(payload["quote"] as? String == "\"é\n")
                #expect(payload["from"] as? String == "/topics/backlog")
                #expect(payload["gcm.message_id"] as? String == ids[n])
                #expect(
                    ((payload["aps"] as? [String: Any])?["alert"] as? [String: Any])?["title"] as? String == "t\(n)")
                #expect(streamed["name"] as? String == "projects/demo-project/messages/\(ids[n])")
                #expect(LedgerTime(parsing: streamed["sentTime"] as? String ?? "") != nil)
                #expect(LedgerTime(parsing: streamed["expireTime"] as? String ?? "") != nil)
            }
        }
    }

    @Test("restart: every unacknowledged message is delivered after the server comes back")
    func restart() async throws {
        let directory = TemporaryDirectory("ledger-restart")
        defer { directory.remove() }
        var configuration = ServerConfiguration.development
        configuration.dataDirectory = directory.path
        let tokenBox = Box()
        do {
            let ledgers = try LedgerRegistry(configuration: configuration, logger: quietLogger)
            let app = Application(
                router: buildRouter(configuration: configuration, ledgers: ledgers),
                services: [DeliverySweeper(ledgers: ledgers)])
            try await app.test(.router) { client in
                let server = TestServer.Client(client: client, ledgers: ledgers)
                let token = try await server.registerDevice()
                tokenBox.token = token
                try await Self.subscribe(server, token, "news")
                for _ in 0..<3 { tokenBox.ids.append(try await Self.send(server, #"{"topic":"news"}"#)) }
                let inbox = try await Self.poll(server, token)
                let first = try #require((inbox.json["messages"] as? [[String: Any]])?.first?["cursor"] as? String)
                _ = try await server.call(
                    .post, Self.registrations(token) + "/messages:ack", headers: TestServer.Client.device,
                    body: #"{"through":"\#(first)"}"#)
            }
            ledgers.closeAll()
        }
        let ledgers = try LedgerRegistry(configuration: configuration, logger: quietLogger)
        defer { ledgers.closeAll() }
        let app = Application(
            router: buildRouter(configuration: configuration, ledgers: ledgers),
            services: [DeliverySweeper(ledgers: ledgers)])
        try await app.test(.router) { client in
            let server = TestServer.Client(client: client, ledgers: ledgers)
            let inbox = try await Self.poll(server, tokenBox.token)
            #expect(Self.ids(inbox) == Array(tokenBox.ids.dropFirst()), "\(inbox.text)")
        }
    }
}

/// Carries values out of a test closure.
private final class Box: @unchecked Sendable {
    var token = ""
    var ids: [String] = []
}
