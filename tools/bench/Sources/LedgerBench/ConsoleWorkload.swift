import AsyncHTTPClient
import Foundation
import LedgerCore
import LedgerQueries
import LedgerStore
import NIOCore
import NIOHTTP1
import LMDBKit

/// The audit console's heaviest pages through `ledger serve` (a child process), signed in as the auditor:
/// a topic every instance subscribes to (its first and a middle page of members, and its chart over the whole
/// history), the log's first and last pages and a filtered page that scans as far as one page may, and the
/// message list. Baseline: a `GET /healthz` round trip on the same server. Target: under 300 ms.
struct ConsoleWorkload {
    let ledgerBinary: String
    let scratch: String
    /// Instances, each registered and subscribed to `everyone`.
    let instances: Int
    /// Events in all: the rest are subscribe/unsubscribe churn on other topics.
    let events: Int

    func run() async throws -> [BenchResult] {
        let data = LedgerBench.scratchDirectory(in: scratch, label: "console")
        defer { try? FileManager.default.removeItem(atPath: data) }
        let buildStart = ContinuousClock.now
        let (head, someToken) = try await build(data)
        let buildSeconds = (ContinuousClock.now - buildStart).seconds
        let port = 20_000 + Int.random(in: 0..<2000)
        let server = try HTTPWorkload.startServer(ledgerBinary: ledgerBinary, data: data, port: port)
        defer {
            server.terminate()
            server.waitUntilExit()
        }
        var configuration = HTTPClient.Configuration()
        configuration.redirectConfiguration = .disallow  // sign-in answers 303 with the cookie
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        do {
            let results = try await measure(
                client, port: port, head: head, someToken: someToken, buildSeconds: buildSeconds)
            try await client.shutdown()
            return results
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    private func measure(_ client: HTTPClient, port: Int, head: UInt64, someToken: String, buildSeconds: Double)
        async throws -> [BenchResult]
    {
        let base = "http://127.0.0.1:\(port)"
        try await HTTPWorkload.waitForHealth(client, base)
        let cookie = try await signIn(client, base)
        let health = try await timings(client, base + "/healthz", cookie: nil, runs: 20)
        let pages: [(String, String)] = [
            (
                "topic page: members 1–100 of \(instances) and the chart of \(instances) changes",
                "/console/topics/everyone"
            ),
            ("topic page: members from the middle", "/console/topics/everyone?after=\(instances / 2)"),
            ("log: first page of \(head) events", "/console/log"),
            ("log: last page", "/console/log?from=\(head - 49)"),
            ("log: filtered by one token (scans 20,000 events)", "/console/log?token=\(someToken)"),
            ("messages: newest 50", "/console/messages"),
            ("topics: first 100, by subscribers", "/console/topics?order=subscribers"),
        ]
        var results: [BenchResult] = []
        for (name, path) in pages {
            let times = try await timings(client, base + path, cookie: cookie, runs: 9)
            results.append(
                BenchResult(
                    name: "console \(name)", unit: "ms", value: percentile(times, 0.5) * 1000,
                    baselineName: "GET /healthz round trip", baseline: percentile(health, 0.5) * 1000,
                    notes: String(
                        format: "slowest of 9: %.1f ms; target < 300 ms; ledger of %d events built at %.0f events/s",
                        (times.max() ?? 0) * 1000, head, Double(head) / buildSeconds)))
        }
        return results
    }

    /// `instances` registrations and subscriptions to `everyone`, churn up to `events`, then 20 sends to
    /// `everyone`. Returns the head seq and one token.
    private func build(_ data: String) async throws -> (UInt64, String) {
        var options = Ledger.Options()
        options.environment.mapSize = 1 << 35
        let ledger = try Ledger.open(dataDirectory: data, project: .default, options: options, logger: silent)
        defer { ledger.close() }
        let everyone = try TopicName("everyone")
        let churn = try (0..<100).map { try TopicName("churn-\($0)") }
        var tokens: [RegistrationToken] = []
        tokens.reserveCapacity(instances)
        for chunk in stride(from: 0, to: instances, by: 5_000) {
            var operations: [LedgerOperation] = []
            for index in chunk..<min(chunk + 5_000, instances) {
                let token = try RegistrationToken("console-\(index &* 2_654_435_761 % 1_000_003):APA91b\(index)")
                tokens.append(token)
                operations.append(.register(token, platform: "ios", appID: nil))
                operations.append(.subscribe(token, everyone, via: .iid))
            }
            _ = try await ledger.append(WriteRequest(actor: "bench", requestID: "c-\(chunk)", operations: operations))
        }
        var written = 2 * instances
        var round = 0
        while written < events - 40 {
            let count = min(10_000, events - 40 - written)
            // Pairs of rounds: subscribe a slice to a topic, then unsubscribe the same slice from it.
            let topic = churn[(round / 2) % churn.count]
            let subscribe = round % 2 == 0
            let start = (round / 2 * 10_000) % max(instances - count, 1)
            let operations: [LedgerOperation] = tokens[start..<start + count].map {
                subscribe ? .subscribe($0, topic, via: .iid) : .unsubscribe($0, topic, via: .iid)
            }
            _ = try await ledger.append(
                WriteRequest(actor: "bench", requestID: "churn-\(round)", operations: operations))
            written += count
            round += 1
        }
        for index in 0..<20 {
            let message = Array(#"{"topic":"everyone","data":{"n":"\#(index)"}}"#.utf8)
            _ = try await ledger.append(
                WriteRequest(
                    actor: "bench", requestID: "send-\(index)",
                    operations: [.send(.topic(everyone), precedence: .leftToRight, messageJSON: message)]))
        }
        ledger.waitForAudiences()
        return (try ledger.readLog { try $0.head().seq }, tokens[instances / 3].rawValue)
    }

    private func signIn(_ client: HTTPClient, _ base: String) async throws -> String {
        var request = HTTPClientRequest(url: base + "/console/sign-in")
        request.method = .POST
        request.headers.add(name: "content-type", value: "application/x-www-form-urlencoded")
        request.body = .bytes(ByteBuffer(string: "key=auditor"))
        let response = try await client.execute(request, timeout: .seconds(30))
        guard let cookie = response.headers["set-cookie"].first?.split(separator: ";").first else {
            throw HTTPBenchError(status: Int(response.status.code))
        }
        return String(cookie)
    }

    private func timings(_ client: HTTPClient, _ url: String, cookie: String?, runs: Int) async throws -> [Double] {
        var times: [Double] = []
        for _ in 0..<runs {
            var request = HTTPClientRequest(url: url)
            if let cookie { request.headers.add(name: "cookie", value: cookie) }
            let start = ContinuousClock.now
            let response = try await client.execute(request, timeout: .seconds(60))
            _ = try await response.body.collect(upTo: 1 << 26)
            times.append((ContinuousClock.now - start).seconds)
            guard response.status == .ok else { throw HTTPBenchError(status: Int(response.status.code)) }
        }
        return times
    }
}
