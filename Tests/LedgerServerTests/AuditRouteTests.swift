import Foundation
import HTTPTypes
import LedgerCore
import LedgerStore
import LedgerTestSupport
import Testing

@Suite("Audit API")
struct AuditRouteTests {
    static let base = "/v1/projects/demo-project/audit"
    static let send = "/v1/projects/demo-project/messages:send"

    /// Registers `count` devices, subscribes them all to 'news' (one batch) and returns their tokens.
    private static func devicesOnNews(_ client: TestServer.Client, count: Int) async throws -> [String] {
        var tokens: [String] = []
        for _ in 0..<count { tokens.append(try await client.registerDevice()) }
        let list = tokens.map { "\"\($0)\"" }.joined(separator: ",")
        let reply = try await client.call(
            .post, "/iid/v1:batchAdd", body: #"{"to":"/topics/news","registration_tokens":[\#(list)]}"#)
        #expect(reply.status == .ok)
        return tokens
    }

    @Test("replay over HTTP: recipients paged in byte order, digest over all of them, matching the record")
    func replay() async throws {
        try await TestServer().run { client in
            let tokens = try await Self.devicesOnNews(client, count: 5)
            let sent = try await client.call(.post, Self.send, body: #"{"message":{"topic":"news"}}"#)
            let id = try #require((sent.json["name"] as? String)?.split(separator: "/").last)
            _ = try await client.headSeq()  // waits for the audience
            var pages: [[String]] = []
            var devices: [Int] = []
            var pageToken: String?
            repeat {
                let query = "?pageSize=2" + (pageToken.map { "&pageToken=\($0)" } ?? "")
                let reply = try await client.call(
                    .get, "\(Self.base)/messages/\(id)\(query)", headers: TestServer.Client.auditor)
                #expect(reply.status == .ok, "\(reply.text)")
                pages.append(reply.json["recipients"] as? [String] ?? [])
                devices += reply.json["recipientDevices"] as? [Int] ?? []
                #expect(reply.json["digestVersion"] as? Int == 2)
                #expect(reply.json["recipientCount"] as? Int == 5)
                #expect(reply.json["matchesRecord"] as? Bool == true)
                #expect(reply.json["recipientDigest"] as? String == reply.json["recordedDigest"] as? String)
                #expect(reply.json["messageId"] as? String == String(id))
                pageToken = reply.json["nextPageToken"] as? String
            } while pageToken != nil
            #expect(pages.map(\.count) == [2, 2, 1])
            let sorted = tokens.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
            #expect(pages.flatMap { $0 } == sorted)
            let digest = try await client.call(.get, "\(Self.base)/messages/\(id)", headers: TestServer.Client.admin)
            // Devices are numbered by first registration: the i-th registered is device i + 1.
            #expect(devices == sorted.map { tokens.firstIndex(of: $0)! + 1 })
            #expect(digest.json["recipientDigest"] as? String == deviceDigestHex(Array(1...5)))
            // Unknown, malformed, and the wrong credentials.
            let unknown = try await client.call(.get, "\(Self.base)/messages/12345", headers: TestServer.Client.auditor)
            #expect(unknown.status == .notFound)
            let malformed = try await client.call(.get, "\(Self.base)/messages/x1", headers: TestServer.Client.auditor)
            #expect(malformed.status == .badRequest && malformed.errorCode == "INVALID_ARGUMENT")
            let device = try await client.call(.get, "\(Self.base)/messages/\(id)", headers: TestServer.Client.device)
            #expect(device.status == .forbidden)
            let nobody = try await client.call(.get, "\(Self.base)/messages/\(id)", headers: [:])
            #expect(nobody.status == .unauthorized)
        }
    }

    @Test("an instance's history and its topics at a seq; a topic's count, members and history")
    func instanceAndTopic() async throws {
        try await TestServer().run { client in
            let tokens = try await Self.devicesOnNews(client, count: 3)
            let subscribedSeq = try await client.headSeq()
            let removed = try await client.call(
                .delete, "/v1/projects/demo-project/registrations/\(tokens[0])/topicSubscriptions/news")
            #expect(removed.status == .ok)
            let instance = try await client.call(
                .get, "\(Self.base)/instances/\(tokens[0])?atSeq=\(subscribedSeq)", headers: TestServer.Client.auditor)
            #expect(instance.status == .ok, "\(instance.text)")
            #expect(instance.json["topics"] as? [String] == ["news"])
            #expect(instance.json["registered"] as? Bool == true)
            let subscriptions = instance.json["subscriptions"] as? [[String: Any]] ?? []
            #expect(subscriptions.count == 1 && subscriptions[0]["untilSeq"] as? Int == Int(subscribedSeq) + 1)
            let now = try await client.call(
                .get, "\(Self.base)/instances/\(tokens[0])", headers: TestServer.Client.auditor)
            #expect(now.json["topics"] as? [String] == [])

            let topic = try await client.call(
                .get, "\(Self.base)/topics/news?members=true&pageSize=1&atSeq=\(subscribedSeq)",
                headers: TestServer.Client.auditor)
            #expect(topic.json["subscriberCount"] as? Int == 3)
            #expect((topic.json["members"] as? [String])?.count == 1 && topic.json["nextPageToken"] != nil)
            #expect(topic.json["history"] == nil)
            let history = try await client.call(
                .get, "\(Self.base)/topics/news/history?pageSize=3", headers: TestServer.Client.auditor)
            let entries = history.json["history"] as? [[String: Any]] ?? []
            #expect(entries.map { $0["count"] as? Int } == [1, 2, 3])
            let next = try #require(history.json["nextPageToken"] as? String)
            let rest = try await client.call(
                .get, "\(Self.base)/topics/news/history?pageToken=\(next)", headers: TestServer.Client.auditor)
            #expect((rest.json["history"] as? [[String: Any]])?.map { $0["count"] as? Int } == [2])
            #expect(rest.json["nextPageToken"] == nil)

            for (uri, status) in [
                ("\(Self.base)/instances/never-registered", HTTPResponse.Status.notFound),
                ("\(Self.base)/instances/bad%20token", .badRequest),
                ("\(Self.base)/topics/never", .notFound),
                ("\(Self.base)/topics/bad%20topic", .badRequest),
                ("\(Self.base)/topics/news?atSeq=999", .badRequest),
                ("\(Self.base)/topics/news?at=yesterday", .badRequest),
                ("\(Self.base)/topics/news?at=2026-01-01&atSeq=1", .badRequest),
                ("\(Self.base)/topics/news?members=true&pageToken=bad%20token", .badRequest),
                ("\(Self.base)/topics/news/history?pageToken=x", .badRequest),
            ] {
                let reply = try await client.call(.get, uri, headers: TestServer.Client.auditor)
                #expect(reply.status == status, "\(uri): \(reply.text)")
            }
        }
    }

    @Test("the event log as JSON lines from a seq, limited, chained")
    func events() async throws {
        try await TestServer().run { client in
            _ = try await Self.devicesOnNews(client, count: 4)
            let all = try await client.call(.get, "\(Self.base)/events", headers: TestServer.Client.auditor)
            #expect(all.status == .ok)
            #expect(all.headers[.contentType]?.hasPrefix("application/x-ndjson") == true)
            let lines = all.text.split(separator: "\n")
            #expect(lines.count == 8)
            let part = try await client.call(
                .get, "\(Self.base)/events?fromSeq=3&limit=2", headers: TestServer.Client.auditor)
            let partLines = part.text.split(separator: "\n")
            #expect(partLines == Array(lines[2..<4]))
            let objects = partLines.compactMap {
                (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
            }
            #expect(objects.map { $0["seq"] as? Int } == [3, 4])
            let past = try await client.call(.get, "\(Self.base)/events?fromSeq=99", headers: TestServer.Client.auditor)
            #expect(past.status == .ok && past.text.isEmpty)
            let bad = try await client.call(.get, "\(Self.base)/events?fromSeq=0", headers: TestServer.Client.auditor)
            #expect(bad.status == .badRequest)
            let device = try await client.call(.get, "\(Self.base)/events", headers: TestServer.Client.device)
            #expect(device.status == .forbidden)
        }
    }
}
