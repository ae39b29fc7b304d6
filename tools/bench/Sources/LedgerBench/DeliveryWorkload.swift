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
        let data = LedgerBench.scratchDirectory(in: scratch, label: "delivery")
        defer { try? FileManager.default.removeItem(atPath: data) }
        let port = 20_000 + Int.random(in: 0..<2000)
        // Every stream is a connection, and the server closes those past its cap (10,000 by default) at once.
        let server = try HTTPWorkload.startServer(
            ledgerBinary: ledgerBinary, data: data, port: port,
            arguments: ["--max-connections", String(devices + idleStreams + 100)])
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
        let devicesClient = StreamingDevices()
        let receipts = devicesClient.receipts
        do {
            try await HTTPWorkload.waitForHealth(client, base)
            let rssBefore = residentBytes(of: server.processIdentifier)
            let tokens = try await registerAndSubscribe(client, base, count: devices + idleStreams)
            // `devices` streams on the topic, then the idle ones (subscribed to nothing that is sent).
            try await devicesClient.open(
                tokens: tokens, host: "127.0.0.1", port: port, project: "demo-project", apiKey: "dev-client-key")
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
            // Progress on stderr (the table goes to stdout): the moment to attach a profiler to the server.
            FileHandle.standardError.write(
                Data(
                    "delivery: \(devices + idleStreams) streams open; server pid \(server.processIdentifier); sending\n"
                        .utf8))
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
            await devicesClient.close()
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
            await devicesClient.close()
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

    private func format(_ value: Double) -> String { String(format: "%.1f", value) }
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
