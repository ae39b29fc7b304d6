import AsyncHTTPClient
import Foundation
import NIOCore

/// HTTP throughput of `ledger serve` (a child process) against a trivial route on the same server, in the
/// same run: Instance ID batchAdd (1000 tokens per request), v1 per-token subscribe at 100 concurrent
/// requests (what the Python SDK does), and topic sends.
struct HTTPWorkload {
    let ledgerBinary: String
    let scratch: String
    let seconds: Double

    func run() async throws -> [BenchResult] {
        let data = (scratch as NSString).appendingPathComponent("ledger-bench-http-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(atPath: data) }
        let port = 18_000 + Int.random(in: 0..<2000)
        let server = try Self.startServer(ledgerBinary: ledgerBinary, data: data, port: port)
        defer {
            server.terminate()
            server.waitUntilExit()
        }
        let base = "http://127.0.0.1:\(port)"
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool = .init(idleTimeout: .seconds(30), concurrentHTTP1ConnectionsPerHostSoftLimit: 128)
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        do {
            var results = try await measureAll(client, base)
            let serverPeak = peakRSS(of: String(server.processIdentifier)) / 1_048_576
            for index in results.indices { results[index].notes += "; server peak RSS \(serverPeak) MiB" }
            try await client.shutdown()
            return results
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    /// `ledger serve` on `port` with the rate limits out of the way.
    static func startServer(ledgerBinary: String, data: String, port: Int) throws -> Process {
        let server = Process()
        server.executableURL = URL(fileURLWithPath: ledgerBinary)
        server.arguments = [
            "serve", "--data", data, "--port", String(port), "--subscription-rate", "1000000000", "--send-quota",
            "1000000000", "--registration-rate", "1000000000",
        ]
        server.standardOutput = FileHandle.nullDevice
        server.standardError = FileHandle.nullDevice
        try server.run()
        return server
    }

    private func measureAll(_ client: HTTPClient, _ base: String) async throws -> [BenchResult] {
        try await Self.waitForHealth(client, base)

        // 2,000 registered devices.
        var registered: [String] = []
        for _ in 0..<2000 {
            let body = try await call(
                client, post: true, base + "/v1/projects/demo-project/registrations", body: "{}", device: true)
            let object = try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any]
            registered.append(object?["token"] as? String ?? "")
        }
        let tokens = registered

        let trivial = try await measure(concurrency: 100) { _ in
            _ = try await call(client, post: false, base + "/healthz")
            return 1
        }
        let batchTokens = tokens.map { "\"\($0)\"" }
        let batch = try await measure(concurrency: 8) { round in
            let slice = batchTokens[(round % 2) * 1000..<(round % 2) * 1000 + 1000].joined(separator: ",")
            let body = #"{"to":"/topics/batch-\#(round % 500)","registration_tokens":[\#(slice)]}"#
            _ = try await call(client, post: true, base + "/iid/v1:batchAdd", body: body)
            return 1000
        }
        let perToken = try await measure(concurrency: 100) { round in
            let token = tokens[round % tokens.count]
            _ = try await call(
                client, post: true,
                base
                    + "/v1/projects/demo-project/registrations/\(token)/topicSubscriptions?topicName=single-\(round / tokens.count)",
                body: "{}")
            return 1
        }
        let sends = try await measure(concurrency: 100) { round in
            _ = try await call(
                client, post: true, base + "/v1/projects/demo-project/messages:send",
                body: #"{"message":{"topic":"batch-\#(round % 500)","data":{"k":"v"}}}"#)
            return 1
        }
        return [
            BenchResult(
                name: "HTTP iid/v1:batchAdd, 1000 tokens/request, 8 concurrent", unit: "token-subscriptions/s",
                value: batch, baselineName: "GET /healthz at 100 concurrent (req/s)", baseline: trivial,
                notes: "durable, group commit"),
            BenchResult(
                name: "HTTP v1 per-token subscribe, 100 concurrent", unit: "req/s", value: perToken,
                baselineName: "GET /healthz at 100 concurrent", baseline: trivial,
                notes: "target ≥ 40 % of the trivial route"),
            BenchResult(
                name: "HTTP topic send, 100 concurrent", unit: "req/s", value: sends,
                baselineName: "GET /healthz at 100 concurrent", baseline: trivial, notes: ""),
        ]
    }

    /// Runs `work(round)` from `concurrency` tasks for `seconds`; returns units per second.
    private func measure(concurrency: Int, _ work: @escaping @Sendable (Int) async throws -> Int) async throws -> Double
    {
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        let counter = RoundCounter()
        let start = ContinuousClock.now
        let units = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<concurrency {
                group.addTask {
                    var units = 0
                    while ContinuousClock.now < deadline { units += try await work(counter.next()) }
                    return units
                }
            }
            return try await group.reduce(0, +)
        }
        return Double(units) / (ContinuousClock.now - start).seconds
    }

    static func waitForHealth(_ client: HTTPClient, _ base: String) async throws {
        for _ in 0..<300 {
            if (try? await Self.call(client, post: false, base + "/healthz")) != nil { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw CancellationError()
    }

    private func call(_ client: HTTPClient, post: Bool, _ url: String, body: String? = nil, device: Bool = false)
        async throws -> [UInt8]
    {
        try await Self.call(client, post: post, url, body: body, device: device)
    }

    /// One request; throws on a status other than 200.
    static func call(_ client: HTTPClient, post: Bool, _ url: String, body: String? = nil, device: Bool = false)
        async throws -> [UInt8]
    {
        var request = HTTPClientRequest(url: url)
        request.method = post ? .POST : .GET
        if device {
            request.headers.add(name: "x-goog-api-key", value: "dev-client-key")
        } else {
            request.headers.add(name: "Authorization", value: "Bearer owner")
        }
        if let body { request.body = .bytes(ByteBuffer(string: body)) }
        let response = try await client.execute(request, timeout: .seconds(30))
        let bytes = try await response.body.collect(upTo: 1 << 20)
        guard response.status == .ok else { throw HTTPBenchError(status: Int(response.status.code)) }
        return Array(bytes.readableBytesView)
    }
}

struct HTTPBenchError: Error { let status: Int }

/// Hands out round numbers to the load tasks.
final class RoundCounter: @unchecked Sendable {
    // @unchecked: `value` is only touched with `lock` held.
    private let lock = NSLock()
    private var value = 0
    func next() -> Int {
        lock.lock()
        defer { lock.unlock() }
        value += 1
        return value - 1
    }
}
