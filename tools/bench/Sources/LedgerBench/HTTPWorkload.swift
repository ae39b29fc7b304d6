import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

/// HTTP throughput of `ledger serve` (a child process), driven from outside by wrk (one thread; Lua scripts in tools/bench/wrk), against `GET /healthz` on the same server in the same run:
/// Instance ID batchAdd (1000 tokens per request, 8 connections), v1 per-token subscribe and topic sends (64
/// connections). Beside it, Redis doing batchAdd's two-direction work (`MULTI; SADD topic:T <1000 tokens>;
/// 1000 × SADD inst:<token> T; EXEC`, 8 connections, `appendfsync always`) when redis-server is installed.
struct HTTPWorkload {
    let ledgerBinary: String
    let scratch: String
    let seconds: Double
    /// Registered devices: 8 groups of 1000 for batchAdd; per-token subscribe cycles through them.
    static let devices = 8000

    func run() async throws -> [BenchResult] {
        let data = LedgerBench.scratchDirectory(in: scratch, label: "http")
        defer { try? FileManager.default.removeItem(atPath: data) }
        let port = 18_000 + Int.random(in: 0..<2000)
        let server = try Self.startServer(ledgerBinary: ledgerBinary, data: data, port: port)
        defer {
            server.terminate()
            server.waitUntilExit()
        }
        let base = "http://127.0.0.1:\(port)"
        let wrk = try Wrk(seconds: seconds)
        let tokensFile = data + ".tokens"
        defer { try? FileManager.default.removeItem(atPath: tokensFile) }
        let tokens = try await register(base)
        try Data(tokens.joined(separator: "\n").utf8).write(to: URL(fileURLWithPath: tokensFile))

        let pid = server.processIdentifier
        let memory = ResidentSampler(pid: pid)
        let health = try wrk.run(base + "/healthz", connections: 64, serverPID: pid)
        let batch = try wrk.run(base, connections: 8, script: "batchadd.lua", tokens: tokensFile, serverPID: pid)
        // Every batchAdd request subscribes its 1000 tokens to a new topic: one token-subscription each.
        let ledgerHolding = MemoryHolding(
            subscriptions: batch.requests * 1000, resident: residentBytes(of: pid),
            anonymous: statusKilobytes("RssAnon:", of: String(pid)) * 1024)
        let perToken = try wrk.run(base, connections: 64, script: "subscribe.lua", tokens: tokensFile, serverPID: pid)
        let sends = try wrk.run(base, connections: 64, script: "send.lua", tokens: tokensFile, serverPID: pid)
        let serverPeak = peakRSS(of: String(pid)) / 1_048_576
        let (peakAnonymous, peakFile) = memory.stop()
        let memoryNote =
            "server peak RSS \(serverPeak) MiB: at most \(peakAnonymous >> 20) MiB anonymous (heap) and "
            + "\(peakFile >> 20) MiB file-backed (the ledger's LMDB map and the binary)"
        var results = [
            BenchResult(
                name: "HTTP iid/v1:batchAdd, 1000 tokens/request, 8 connections (wrk)", unit: "token-subscriptions/s",
                value: batch.requestsPerSecond * 1000, baselineName: "GET /healthz, 64 connections (req/s)",
                baseline: health.requestsPerSecond, notes: "durable, group commit; \(batch.summary)"),
            BenchResult(
                name: "HTTP v1 per-token subscribe, 64 connections (wrk)", unit: "req/s",
                value: perToken.requestsPerSecond, baselineName: "GET /healthz, 64 connections",
                baseline: health.requestsPerSecond, notes: "target ≥ 60 %; \(perToken.summary)"),
            BenchResult(
                name: "HTTP topic send, 64 connections (wrk)", unit: "req/s", value: sends.requestsPerSecond,
                baselineName: "GET /healthz, 64 connections", baseline: health.requestsPerSecond,
                notes: "target ≥ 50 %; \(sends.summary)"),
        ]
        for index in results.indices { results[index].notes += "; /healthz: \(health.summary); " + memoryNote }
        if let redis = try? RedisServer(scratch: scratch) {
            defer { redis.stop() }
            let (rate, units) = try Self.redisBulk(redis, tokens: tokens, seconds: seconds, connections: 8)
            let redisHolding = MemoryHolding(
                subscriptions: units, resident: redis.residentSetBytes,
                anonymous: statusKilobytes("RssAnon:", of: String(redis.processIdentifier)) * 1024)
            results.append(
                BenchResult(
                    name: "HTTP batchAdd vs Redis doing the same two-direction work, 8 connections",
                    unit: "token-subscriptions/s", value: batch.requestsPerSecond * 1000,
                    baselineName: "Redis MULTI; SADD topic <1000>; 1000 × SADD inst T; EXEC (appendfsync always)",
                    baseline: rate, notes: "target ≥ 100 %"))
            results.append(
                BenchResult(
                    name: "memory per token-subscription held after the bulk load (RSS ÷ subscriptions)",
                    unit: "bytes", value: ledgerHolding.bytesPerSubscription,
                    baselineName: "Redis after its bulk load, same measure",
                    baseline: redisHolding.bytesPerSubscription,
                    notes: "TopicLedger \(ledgerHolding.summary) (the ledger's mapped pages and the binary in the "
                        + "rest); Redis \(redisHolding.summary); ratio < 100 %: TopicLedger holds less"))
        } else {
            FileHandle.standardError.write(Data("http: redis-server is missing, no Redis bulk peer\n".utf8))
        }
        if let peer = try? Self.nodeRedisSubscribe(scratch: scratch, wrk: wrk, tokens: tokensFile) {
            results.append(
                BenchResult(
                    name: "HTTP per-token subscribe vs a hand-rolled Node+Redis service, 64 connections (wrk)",
                    unit: "req/s", value: perToken.requestsPerSecond,
                    baselineName: "Node 20 http + Redis appendfsync always, MULTI SADD topic SADD inst EXEC",
                    baseline: peer.requestsPerSecond,
                    notes: "target ≥ 100 % (issue 53); the same subscribe.lua; peer: \(peer.summary)"))
        } else {
            FileHandle.standardError.write(Data("http: node or redis-server is missing, no Node+Redis peer\n".utf8))
        }
        return results
    }

    /// The per-token subscribe of tools/bench/peers/node-redis-subscribe.js (Node's http module in front of Redis
    /// with `appendfsync always`, one MULTI/SADD/SADD/EXEC per request), under the same wrk script.
    static func nodeRedisSubscribe(scratch: String, wrk: Wrk, tokens: String) throws -> Wrk.Outcome {
        guard let node = ["/usr/bin/node", "/usr/local/bin/node"].first(where: FileManager.default.isExecutableFile)
        else { throw PeerError("node is missing") }
        let redis = try RedisServer(scratch: scratch)
        defer { redis.stop() }
        let port = 20_000 + Int.random(in: 0..<2000)
        let peer = Process()
        peer.executableURL = URL(fileURLWithPath: node)
        let script = ((Wrk.scripts as NSString).deletingLastPathComponent as NSString).appendingPathComponent(
            "peers/node-redis-subscribe.js")
        peer.arguments = [script, "--port", String(port), "--redis-port", String(redis.port)]
        peer.standardOutput = FileHandle.nullDevice
        peer.standardError = FileHandle.nullDevice
        try peer.run()
        defer {
            peer.terminate()
            peer.waitUntilExit()
        }
        let base = "http://127.0.0.1:\(port)"
        for attempt in 0..<100 {
            // Listening: a TCP connection is accepted (RESPConnection only connects until it is asked).
            if (try? RESPConnection(port: port)) != nil { break }
            if attempt == 99 { throw PeerError("the Node+Redis peer did not start") }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return try wrk.run(
            base, connections: 64, script: "subscribe.lua", tokens: tokens, serverPID: peer.processIdentifier)
    }

    /// Registers `devices` devices, 16 at a time; returns their tokens.
    private func register(_ base: String) async throws -> [String] {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool = .init(idleTimeout: .seconds(30), concurrentHTTP1ConnectionsPerHostSoftLimit: 16)
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        do {
            try await Self.waitForHealth(client, base)
            let tokens = try await withThrowingTaskGroup(of: [String].self) { group in
                for lane in 0..<16 {
                    group.addTask {
                        var tokens: [String] = []
                        for _ in stride(from: lane, to: Self.devices, by: 16) {
                            let body = try await Self.call(
                                client, post: true, base + "/v1/projects/demo-project/registrations", body: "{}",
                                device: true)
                            let object = try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any]
                            guard let token = object?["token"] as? String else { throw HTTPBenchError(status: 200) }
                            tokens.append(token)
                        }
                        return tokens
                    }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            try await client.shutdown()
            return tokens
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    /// Token-subscriptions per second of Redis doing what one batchAdd does, in both directions, in one
    /// transaction per 1000 tokens.
    static func redisBulk(_ server: RedisServer, tokens: [String], seconds: Double, connections: Int) throws
        -> (rate: Double, subscriptions: Int)
    {
        let groups = tokens.count / 1000
        let port = server.port
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        let start = ContinuousClock.now
        let done = try onThreads(connections) { thread in
            let connection = try RESPConnection(port: port)
            var round = 0
            var units = 0
            while ContinuousClock.now < deadline {
                let group = tokens[((thread + round) % groups) * 1000..<((thread + round) % groups) * 1000 + 1000]
                let topic = "bulk-\(thread)-\(round)"
                var commands: [[String]] = [["MULTI"], ["SADD", "topic:" + topic] + group]
                for token in group { commands.append(["SADD", "inst:" + token, topic]) }
                commands.append(["EXEC"])
                let replies = try connection.pipeline(commands)
                guard case .array(let results?) = replies.last, results.count == 1001 else {
                    throw PeerError("redis: EXEC did not run the 1001 commands")
                }
                units += 1000
                round += 1
            }
            return units
        }
        return (Double(done) / (ContinuousClock.now - start).seconds, done)
    }

    /// `ledger serve` on `port` in dev mode with the rate limits out of the way, and `arguments` after.
    static func startServer(ledgerBinary: String, data: String, port: Int, arguments: [String] = []) throws -> Process {
        let server = Process()
        server.executableURL = URL(fileURLWithPath: ledgerBinary)
        server.arguments =
            [
                "serve", "--data", data, "--port", String(port), "--subscription-rate", "1000000000", "--send-quota",
                "1000000000", "--registration-rate", "1000000000",
            ] + arguments
        server.standardOutput = FileHandle.nullDevice
        server.standardError = FileHandle.nullDevice
        try server.run()
        return server
    }

    static func waitForHealth(_ client: HTTPClient, _ base: String) async throws {
        for _ in 0..<300 {
            if (try? await Self.call(client, post: false, base + "/healthz")) != nil { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw CancellationError()
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

/// A server's memory right after a bulk load, against the token-subscriptions it then holds: the targets ask
/// for a peak RSS ≤ 256 MiB, and this says what the same data costs the store a user would pick instead.
struct MemoryHolding {
    let subscriptions: Int
    /// VmRSS, bytes.
    let resident: Int
    /// RssAnon (the heap), bytes.
    let anonymous: Int

    var bytesPerSubscription: Double { Double(resident) / Double(max(subscriptions, 1)) }
    var summary: String {
        "RSS \(resident >> 20) MiB (\(anonymous >> 20) MiB anonymous) holding \(subscriptions) token-subscriptions"
    }
}

/// wrk (Debian's `wrk`), run as a separate process: one thread, `connections` connections, for `seconds`.
struct Wrk {
    let binary: String
    let seconds: Double
    /// tools/bench/wrk, found from this file's path at build time.
    static let scripts = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("wrk").path

    init(seconds: Double) throws {
        guard let binary = ["/usr/bin/wrk", "/usr/local/bin/wrk"].first(where: FileManager.default.isExecutableFile)
        else { throw PeerError("wrk is missing: apt-get install -y wrk (tools/bench/run.sh does)") }
        self.binary = binary
        self.seconds = seconds
    }

    struct Outcome {
        let requestsPerSecond: Double
        let p99: String
        let requests: Int
        /// The server's CPU time (user + system) per request: steadier than the rate on a shared machine.
        var serverCPUMicroseconds: Double?
        var summary: String {
            "\(requests) requests, p99 \(p99) (wrk -t1)"
                + (serverCPUMicroseconds.map { ", server CPU \(String(format: "%.0f", $0)) µs/request" } ?? "")
        }
    }

    /// Runs wrk against `url` (with `script` from tools/bench/wrk, given the tokens file); fails on any answer
    /// that is not a 2xx and on socket errors.
    func run(_ url: String, connections: Int, script: String? = nil, tokens: String? = nil, serverPID: Int32? = nil)
        throws -> Outcome
    {
        let cpuBefore = serverPID.map(cpuSeconds(of:))
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        var arguments = ["-t1", "-c\(connections)", "-d\(Int(seconds.rounded(.up)))s", "--latency", "--timeout", "10s"]
        if let script { arguments += ["-s", (Self.scripts as NSString).appendingPathComponent(script)] }
        process.arguments = arguments + [url]
        var environment = ProcessInfo.processInfo.environment
        if let tokens { environment["LEDGER_BENCH_TOKENS"] = tokens }
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        func value(after label: String) -> String? {
            text.split(separator: "\n").first { $0.contains(label) }.map {
                String($0.split(separator: " ").last ?? "")
            }
        }
        guard process.terminationStatus == 0, let rate = value(after: "Requests/sec:").flatMap(Double.init) else {
            throw PeerError("wrk \(script ?? url) failed:\n\(text)")
        }
        if let failed = value(after: "Non-2xx or 3xx responses:") {
            throw PeerError("wrk \(script ?? url): \(failed) answers were not 2xx:\n\(text)")
        }
        if text.contains("Socket errors:") { throw PeerError("wrk \(script ?? url): socket errors:\n\(text)") }
        let requests =
            text.split(separator: "\n").first { $0.contains("requests in") }
            .flatMap { Int($0.split(separator: " ").first ?? "") } ?? 0
        let p99 =
            text.split(separator: "\n").first { $0.trimmingCharacters(in: .whitespaces).hasPrefix("99%") }
            .map { String($0.split(separator: " ").last ?? "") } ?? "?"
        var outcome = Outcome(requestsPerSecond: rate, p99: p99, requests: requests)
        if let serverPID, let cpuBefore, requests > 0 {
            outcome.serverCPUMicroseconds = (settledCPUSeconds(of: serverPID) - cpuBefore) * 1e6 / Double(requests)
        }
        return outcome
    }
}

/// The CPU time of `pid` once it has gone idle (under 10 ms of CPU in 250 ms, waiting at most 30 s): work a
/// load leaves queued when it stops — sends' audiences still to be recorded — counts toward that load, and
/// does not run into the next one.
func settledCPUSeconds(of pid: Int32) -> Double {
    var last = cpuSeconds(of: pid)
    for _ in 0..<120 {
        Thread.sleep(forTimeInterval: 0.25)
        let now = cpuSeconds(of: pid)
        defer { last = now }
        if now - last < 0.01 { return now }
    }
    return last
}

/// The peak anonymous memory (heap) and peak file-backed resident memory (the LMDB map's pages, the binary) of
/// a process, sampled every 100 ms until ``stop()``. VmHWM counts both; the file-backed pages are the kernel's
/// page cache mapped in, which it may drop at any time, so they say how big the ledger is, not what the
/// server holds.
final class ResidentSampler: @unchecked Sendable {
    private let pid: String
    private let lock = NSLock()
    private var peaks = (anonymous: 0, file: 0)
    private var running = true
    private let finished = DispatchSemaphore(value: 0)

    init(pid: Int32) {
        self.pid = String(pid)
        Thread { [self] in
            while lock.withLock({ running }) {
                let anonymous = statusKilobytes("RssAnon:", of: self.pid) * 1024
                let file = statusKilobytes("RssFile:", of: self.pid) * 1024
                lock.withLock { peaks = (max(peaks.anonymous, anonymous), max(peaks.file, file)) }
                Thread.sleep(forTimeInterval: 0.1)
            }
            finished.signal()
        }.start()
    }

    /// Stops sampling; the peaks in bytes.
    func stop() -> (anonymous: Int, file: Int) {
        lock.withLock { running = false }
        finished.wait()
        return lock.withLock { peaks }
    }
}
