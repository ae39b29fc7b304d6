import AsyncHTTPClient
import Foundation
import NIOCore

/// Device delivery through `ledger serve` (a child process): `devices` devices streaming Server-Sent Events
/// on one topic; for each send, the time from the send's acknowledgement to each device (and to the last
/// device) receiving it. Baseline: a `GET /healthz` round trip on the same server. Then the server's memory
/// with `idleStreams` open streams against its memory before any.
struct DeliveryWorkload {
    let ledgerBinary: String
    let scratch: String
    let devices: Int
    let sends: Int
    let idleStreams: Int

    func run() async throws -> [BenchResult] {
        let data = (scratch as NSString).appendingPathComponent("ledger-bench-delivery-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(atPath: data) }
        let port = 20_000 + Int.random(in: 0..<2000)
        let server = try HTTPWorkload.startServer(ledgerBinary: ledgerBinary, data: data, port: port)
        defer {
            server.terminate()
            server.waitUntilExit()
        }
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool = .init(
            idleTimeout: .seconds(120), concurrentHTTP1ConnectionsPerHostSoftLimit: idleStreams + devices + 16)
        configuration.timeout = .init(connect: .seconds(30), read: .seconds(600))
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        let base = "http://127.0.0.1:\(port)"
        let receipts = Receipts()
        do {
            try await HTTPWorkload.waitForHealth(client, base)
            let rssBefore = residentBytes(of: server.processIdentifier)
            let tokens = try await registerAndSubscribe(client, base, count: devices + idleStreams)
            // `devices` streams on the topic, then the idle ones (subscribed to nothing that is sent).
            let streamTasks = tokens.enumerated().map { index, token in
                Task { try await stream(client, base, token: token, index: index, receipts: receipts) }
            }
            try await receipts.waitForConnections(devices + idleStreams, timeout: .seconds(120))
            let rssWithStreams = residentBytes(of: server.processIdentifier)

            var healthTimes: [Double] = []
            for _ in 0..<20 {
                let start = ContinuousClock.now
                _ = try await HTTPWorkload.call(client, post: false, base + "/healthz")
                healthTimes.append((ContinuousClock.now - start).seconds)
            }
            var lastDevice: [Double] = []
            var everyDevice: [Double] = []
            // CPU spent by the server and by this load generator during the sends (they share the 2 cores).
            let serverCPUBefore = cpuSeconds(of: server.processIdentifier)
            let clientCPUBefore = cpuSeconds(of: getpid())
            for round in 0..<sends {
                let body = try await HTTPWorkload.call(
                    client, post: true, base + "/v1/projects/demo-project/messages:send",
                    body: #"{"message":{"topic":"delivery","data":{"round":"\#(round)"}}}"#)
                let acknowledged = ContinuousClock.now
                let name = (try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])?["name"] as? String
                let id = String(name?.split(separator: "/").last ?? "")
                let arrivals = try await receipts.waitForArrivals(of: id, count: devices, timeout: .seconds(30))
                let latencies = arrivals.map { max(0, ($0 - acknowledged).seconds) }
                lastDevice.append(latencies.max() ?? 0)
                everyDevice += latencies
            }
            let serverCPU = (cpuSeconds(of: server.processIdentifier) - serverCPUBefore) / Double(sends) * 1000
            let clientCPU = (cpuSeconds(of: getpid()) - clientCPUBefore) / Double(sends) * 1000
            for task in streamTasks { task.cancel() }
            try? await client.shutdown()
            let health = percentile(healthTimes, 0.5)
            return [
                BenchResult(
                    name: "delivery: send ack → last of \(devices) streaming devices, p50", unit: "ms",
                    value: percentile(lastDevice, 0.5) * 1000, baselineName: "GET /healthz round trip, p50",
                    baseline: health * 1000,
                    notes:
                        "\(sends) sends; p99 \(format(percentile(lastDevice, 0.99) * 1000)) ms (target p99 ≤ 50 ms); "
                        + "CPU per send: server \(format(serverCPU)) ms, load generator \(format(clientCPU)) ms"),
                BenchResult(
                    name: "delivery: send ack → each device, p50 / p99", unit: "ms",
                    value: percentile(everyDevice, 0.5) * 1000, baselineName: "GET /healthz round trip, p50",
                    baseline: health * 1000,
                    notes: "p99 \(format(percentile(everyDevice, 0.99) * 1000)) ms over \(everyDevice.count) receipts"),
                BenchResult(
                    name: "server memory with \(devices + idleStreams) open streams", unit: "MiB",
                    value: Double(rssWithStreams) / 1_048_576, baselineName: "before any stream",
                    baseline: Double(rssBefore) / 1_048_576,
                    notes:
                        "\(format(Double(rssWithStreams - rssBefore) / Double(devices + idleStreams) / 1024)) KiB per stream (VmRSS of the server)"
                ),
            ]
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    /// Registers `count` devices; the first `devices` are subscribed to "delivery".
    private func registerAndSubscribe(_ client: HTTPClient, _ base: String, count: Int) async throws -> [String] {
        var tokens: [String] = []
        for _ in 0..<count {
            let body = try await HTTPWorkload.call(
                client, post: true, base + "/v1/projects/demo-project/registrations", body: "{}", device: true)
            tokens.append(
                (try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])?["token"] as? String ?? "")
        }
        for chunk in stride(from: 0, to: devices, by: 1000) {
            let list = tokens[chunk..<min(chunk + 1000, devices)].map { "\"\($0)\"" }.joined(separator: ",")
            _ = try await HTTPWorkload.call(
                client, post: true, base + "/iid/v1:batchAdd",
                body: #"{"to":"/topics/delivery","registration_tokens":[\#(list)]}"#)
        }
        return tokens
    }

    /// One device's stream: records when each message id arrives.
    private func stream(_ client: HTTPClient, _ base: String, token: String, index: Int, receipts: Receipts)
        async throws
    {
        var request = HTTPClientRequest(url: base + "/v1/projects/demo-project/registrations/\(token)/messages:stream")
        request.headers.add(name: "x-goog-api-key", value: "dev-client-key")
        let response = try await client.execute(request, timeout: .seconds(600))
        var pending = ""
        var connected = false
        for try await buffer in response.body {
            if !connected {
                connected = true
                receipts.connected()
            }
            pending += String(buffer: buffer)
            while let range = pending.range(of: "\n\n") {
                let event = pending[..<range.lowerBound]
                if let id = event.range(of: #""messageId":""#).map({ event[$0.upperBound...].prefix { $0.isNumber } }) {
                    receipts.arrived(String(id), at: ContinuousClock.now)
                }
                pending.removeSubrange(..<range.upperBound)
            }
        }
    }

    private func format(_ value: Double) -> String { String(format: "%.1f", value) }
}

/// Arrivals per message id, and how many streams are connected.
private final class Receipts: @unchecked Sendable {
    // @unchecked: every field is only touched with `lock` held.
    private let lock = NSLock()
    private var arrivals: [String: [ContinuousClock.Instant]] = [:]
    private var connections = 0

    func connected() {
        lock.lock()
        connections += 1
        lock.unlock()
    }

    func arrived(_ id: String, at instant: ContinuousClock.Instant) {
        lock.lock()
        arrivals[id, default: []].append(instant)
        lock.unlock()
    }

    func waitForConnections(_ count: Int, timeout: Duration) async throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if lock.withLock({ connections }) >= count { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw BenchError("only some of \(count) streams connected")
    }

    func waitForArrivals(of id: String, count: Int, timeout: Duration) async throws -> [ContinuousClock.Instant] {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let seen = lock.withLock { arrivals[id] ?? [] }
            if seen.count >= count { return seen }
            try await Task.sleep(for: .microseconds(200))
        }
        throw BenchError("message \(id) reached only some of \(count) devices")
    }
}

/// The `p` quantile (0…1) of `values`, nearest rank.
func percentile(_ values: [Double], _ p: Double) -> Double {
    guard !values.isEmpty else { return 0 }
    let sorted = values.sorted()
    let rank = max(1, Int((Double(sorted.count) * p).rounded(.up)))
    return sorted[min(sorted.count, rank) - 1]
}

/// User + system CPU time of process `pid` so far, in seconds (/proc/PID/stat fields 14 and 15).
func cpuSeconds(of pid: Int32) -> Double {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = stat.lastIndex(of: ")")
    else { return 0 }
    // Fields after the command name, which may hold spaces: state is field 3, utime 14, stime 15.
    let fields = stat[stat.index(after: close)...].split(separator: " ")
    guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}
