// ledger-bench: the store's workloads, each against a baseline measured in the same run.
// Run through tools/bench/run.sh (release build). See docs/performance.md.

import ArgumentParser
import Foundation
import LMDBKit
import LedgerCore
import LedgerQueries
import LedgerStore
import Logging

@main
struct LedgerBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ledger-bench", abstract: "Store benchmarks with same-run baselines.")

    @Option(
        help:
            "quick (under 2 minutes of workloads) or full (larger ledgers and more streams: about 20 minutes on 2 cores)."
    )
    var mode: String = "quick"

    @Option(help: "Directory for scratch ledgers (removed afterwards).")
    var scratch: String = NSTemporaryDirectory()

    @Option(help: "Write the results as JSON to this file.")
    var json: String?

    @Option(help: "Seed for the generated workloads.")
    var seed: UInt64 = 1

    @Option(
        help:
            "Run only these workloads (comma-separated: append, rebuild, scan, audience, parse, message, import, http, resolve, replay, erasure, expiry, proofs, delivery, console, routing, peers; peers adds Redis and SQLite beside append and audience; isolation and growth run only when named)."
    )
    var only: String?

    @Option(help: "Simulated days of the growth workload (run only when named: --only growth).")
    var days: Int = 30

    @Option(help: "The contentRetention of the growth workload's second run, in days.")
    var contentRetentionDays: Int = 7

    @Option(help: "Events in the generated ledger (overrides the mode's size).")
    var events: Int?

    @Option(
        help:
            "Keep the rebuild and scan ledger here: built once if the directory does not exist, reused and kept if it does (for profiling one workload again and again)."
    )
    var keepLedger: String?

    /// The `ledger` executable built beside this one (tools/bench/run.sh builds both).
    var ledgerBinary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("ledger")
            .path
    }

    func wants(_ workload: String) -> Bool {
        only.map { $0.split(separator: ",").contains(Substring(workload)) } ?? true
    }

    func run() async throws {
        let full = mode == "full"
        var results: [BenchResult] = []
        var sections: [Section] = []
        /// Runs one workload, noting its wall time and the harness's peak RSS during it.
        func section(_ name: String, _ body: () async throws -> [BenchResult]) async throws {
            resetPeakRSS()
            let start = ContinuousClock.now
            results += try await body()
            sections.append(Section(name: name, seconds: (ContinuousClock.now - start).seconds, peakRSS: peakRSS()))
        }
        if wants("append") {
            try await section("append") {
                var rates: [Int: Double] = [:]
                var appended: [BenchResult] = []
                for writers in [1, 8, 64] {
                    let result = try await appendWorkload(writers: writers, requests: full ? 20_000 : 4_000)
                    rates[writers] = result.value
                    appended.append(result)
                }
                if wants("peers") { appended += try peerSubscribe(ourRates: rates, requests: full ? 20_000 : 2_000) }
                return appended
            }
        }
        if only.map({ $0.split(separator: ",").contains("isolation") }) ?? false {
            try await section("isolation") { try await isolationWorkload(requests: full ? 20_000 : 4_000) }
        }
        if wants("audience") {
            try await section("audience") {
                var workload = AudienceWorkload(
                    instances: 1_000_000, subscriptionsPerInstance: full ? 5 : 2, seed: seed, scratch: scratch)
                workload.peers = wants("peers")
                return try await workload.run()
            }
        }
        if wants("parse") { try await section("parse") { [AudienceWorkload.parseRate()] } }
        if wants("message") { try await section("message") { MessageWorkload.run() } }
        if wants("routing") { try await section("routing") { try RoutingWorkload.run() } }
        if wants("import") {
            try await section("import") { try importWorkloads(operations: full ? 2_000_000 : 200_000) }
        }
        if wants("http") {
            try await section("http") {
                try await HTTPWorkload(ledgerBinary: ledgerBinary, scratch: scratch, seconds: full ? 10 : 2).run()
            }
        }
        if wants("resolve") {
            try await section("resolve") {
                try await ResolveWorkload(scratch: scratch, seed: seed, batches: full ? 400 : 100).run(
                    devices: [HTTPWorkload.devices, full ? 1_000_000 : 200_000])
            }
        }
        if wants("delivery") {
            try await section("delivery") {
                try await DeliveryWorkload(
                    ledgerBinary: ledgerBinary, scratch: scratch, devices: 1000, sends: full ? 50 : 20,
                    idleStreams: full ? 9000 : 1000
                ).run()
            }
        }
        if wants("console") {
            try await section("console") {
                try await ConsoleWorkload(
                    ledgerBinary: ledgerBinary, scratch: scratch, instances: full ? 1_000_000 : 200_000,
                    events: full ? 10_000_000 : 1_000_000
                ).run()
            }
        }
        if wants("replay") {
            try await section("replay") {
                try await ReplayWorkload(
                    instances: full ? 1_000_000 : 100_000, largeEvents: full ? 10_000_000 : 500_000, seed: seed,
                    scratch: scratch, ledgerBinary: ledgerBinary
                ).run()
            }
        }
        if wants("erasure") {
            try await section("erasure") {
                try await ErasureWorkload(
                    instances: full ? 1_000_000 : 100_000, events: full ? 10_000_000 : 1_000_000, seed: seed,
                    scratch: scratch
                ).run()
            }
        }
        if wants("expiry") {
            try await section("expiry") {
                try await ExpiryWorkload(
                    silentDevices: 100_000, writes: full ? 8_000 : 2_000, seed: seed, scratch: scratch
                ).run()
            }
        }
        if only.map({ $0.split(separator: ",").contains("growth") }) ?? false {
            try await section("growth") {
                try await GrowthWorkload(
                    devices: 200_000, days: days, contentRetentionDays: contentRetentionDays, seed: seed,
                    scratch: scratch
                ).run()
            }
        }
        if wants("proofs") {
            try await section("proofs") {
                try await ProofWorkload(
                    largeEvents: full ? 10_000_000 : 1_000_000, smallEvents: 100_000, seed: seed, scratch: scratch
                ).run()
            }
        }
        if wants("rebuild") || wants("scan") {
            try await section("rebuild + scan") {
                let size = events ?? (full ? 2_000_000 : 300_000)
                let ledgerDirectory: String
                if let keepLedger {
                    if !FileManager.default.fileExists(atPath: keepLedger) {
                        try FileManager.default.moveItem(
                            atPath: try await buildLedger(events: size), toPath: keepLedger)
                    }
                    ledgerDirectory = keepLedger
                } else {
                    ledgerDirectory = try await buildLedger(events: size)
                }
                defer { if keepLedger == nil { try? FileManager.default.removeItem(atPath: ledgerDirectory) } }
                var scanned: [BenchResult] = []
                if wants("rebuild") { scanned.append(try rebuildWorkload(directory: ledgerDirectory)) }
                if wants("scan") {
                    scanned.append(try scanWorkload(directory: ledgerDirectory, renderJSON: false))
                    scanned.append(try scanWorkload(directory: ledgerDirectory, renderJSON: true))
                }
                return scanned
            }
        }
        printTable(results, sections)
        if let json {
            let data = try JSONSerialization.data(
                withJSONObject: [
                    "mode": mode, "seed": seed, "machine": machineDescription(),
                    "peakRSSBytes": peakRSS(), "results": results.map(\.dictionary),
                    "workloads": sections.map(\.dictionary),
                ], options: [.prettyPrinted, .sortedKeys])
            try data.write(to: URL(fileURLWithPath: json))
        }
    }

    // MARK: Workloads

    /// Durable appends from `writers` concurrent tasks, one subscription change per request, projections
    /// included; baseline: raw LMDB puts of the same record size, same durability, same batch size.
    func appendWorkload(writers: Int, requests: Int, isolation: Ledger.RequestIsolation = .retryAlone) async throws
        -> BenchResult
    {
        let directory = scratchDirectory("append")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var options = Ledger.Options()
        options.isolation = isolation
        let ledger = try Ledger.open(dataDirectory: directory, project: .default, options: options, logger: silent)
        let tokens = try (0..<writers).map { try RegistrationToken("bench-writer-\($0):APA91b-\(seed)") }
        _ = try await ledger.append(
            WriteRequest(
                actor: "bench", requestID: "register",
                operations: tokens.map { .register($0, platform: "ios", appID: nil) }))
        let before = ledger.writerStatistics
        let perWriter = requests / writers
        let start = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, token) in tokens.enumerated() {
                group.addTask {
                    for round in 0..<perWriter {
                        let topic = try TopicName("topic-\(round % 100)")
                        let operation: LedgerOperation =
                            (round / 100) % 2 == 0
                            ? .subscribe(token, topic, via: .iid) : .unsubscribe(token, topic, via: .iid)
                        _ = try await ledger.append(
                            WriteRequest(actor: "bench", requestID: "w\(index)-\(round)", operations: [operation]))
                    }
                }
            }
            try await group.waitForAll()
        }
        let elapsed = ContinuousClock.now - start
        let after = ledger.writerStatistics
        let appended = Double(perWriter * writers)
        let commits = after.commits - before.commits
        let batch = max(1, Int((appended / Double(commits)).rounded()))
        let recordSize = try ledger.readLog { snapshot in
            var bytes = 0
            var count = 0
            try snapshot.forEachEvent(from: 2) { event, _ in
                bytes += EventCodec.encode(event).count + HashChain.hashSize
                count += 1
                return count < 1000
            }
            return bytes / max(count, 1)
        }
        ledger.close()
        let rate = appended / elapsed.seconds
        let baseline = try rawPuts(count: Int(appended), batch: batch, valueSize: recordSize)
        // Time in one write transaction, the ledger's and the baseline's: where the ratio comes from.
        let transaction = (after.commitTime - before.commitTime).seconds / Double(commits) * 1000
        let rawTransaction = Double(batch) / baseline * 1000
        return BenchResult(
            name: "append, \(writers) writer\(writers == 1 ? "" : "s")", unit: "events/s", value: rate,
            baselineName: "raw LMDB puts, batch \(batch), \(recordSize) B, fsync", baseline: baseline,
            notes:
                "\(commits) commits, mean batch \(String(format: "%.1f", appended / Double(commits))), "
                + "write transaction \(String(format: "%.2f", transaction)) ms "
                + "(raw: \(String(format: "%.2f", rawTransaction)) ms)")
    }

    /// The append workload's subscribe requests on Redis and SQLite, at 1 and 64 writers, against the
    /// ledger's rates from the same run.
    func peerSubscribe(ourRates: [Int: Double], requests: Int) throws -> [BenchResult] {
        let server = try RedisServer(scratch: scratch)
        defer { server.stop() }
        var results: [BenchResult] = []
        for writers in [1, 64] {
            guard let ours = ourRates[writers] else { continue }
            // One writer pays a whole fsync per request on every store; fewer requests keep the run short.
            let workload = PeerSubscribeWorkload(
                writers: writers, requests: writers == 1 ? requests / 4 : requests, scratch: scratch)
            let label = "\(writers) writer\(writers == 1 ? "" : "s")"
            results.append(
                BenchResult(
                    name: "peer: durable subscribe, \(label), vs Redis", unit: "changes/s", value: ours,
                    baselineName: "Redis 7 appendfsync always, MULTI SADD+SADD EXEC",
                    baseline: try workload.redis(server),
                    notes: "ratio > 100 %: TopicLedger is faster; loopback RESP, one connection per writer"))
            results.append(
                BenchResult(
                    name: "peer: durable subscribe, \(label), vs SQLite", unit: "changes/s", value: ours,
                    baselineName: "SQLite WAL synchronous=FULL, one INSERT/DELETE per transaction",
                    baseline: try workload.sqlite(),
                    notes: "ratio > 100 %: TopicLedger is faster; one connection per writer, busy_timeout"))
        }
        return results
    }

    /// Raw LMDB puts in durable transactions of `batch` puts: the ceiling for any durable append.
    func rawPuts(count: Int, batch: Int, valueSize: Int) throws -> Double {
        let directory = scratchDirectory("raw")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let environment = try LMDBEnvironment(path: directory)
        let database = try environment.write { try $0.openDatabase("raw", flags: .create) }
        let value = [UInt8](repeating: 0x5A, count: valueSize)
        var key: UInt64 = 0
        let start = ContinuousClock.now
        while key < UInt64(count) {
            try environment.write { txn in
                for _ in 0..<batch where key < UInt64(count) {
                    key += 1
                    try txn.put(database, key: key, value: value, flags: .append)
                }
            }
        }
        return Double(count) / (ContinuousClock.now - start).seconds
    }

    /// How much per-request atomicity costs each way (``Ledger/RequestIsolation``): durable appends at 64
    /// writers with one nested LMDB transaction per request, against one transaction per batch with the
    /// retry-alone fallback — interleaved A/B, three rounds, so that the disk's drift hits both alike.
    func isolationWorkload(requests: Int) async throws -> [BenchResult] {
        var retry: [Double] = []
        var nested: [Double] = []
        for _ in 0..<3 {
            retry.append(try await appendWorkload(writers: 64, requests: requests, isolation: .retryAlone).value)
            nested.append(try await appendWorkload(writers: 64, requests: requests, isolation: .nestedPerRequest).value)
        }
        let median = { (values: [Double]) in values.sorted()[values.count / 2] }
        return [
            BenchResult(
                name: "append, 64 writers, a nested transaction per request", unit: "events/s", value: median(nested),
                baselineName: "one transaction per batch, retry alone on failure (default)", baseline: median(retry),
                notes:
                    "medians of 3 interleaved rounds; nested \(nested.map { String(Int($0)) }.joined(separator: ", ")), "
                    + "retry \(retry.map { String(Int($0)) }.joined(separator: ", "))")
        ]
    }

    /// A realistic ledger: instances register, subscribe across 1,000 topics, some unsubscribe or
    /// unregister, and sends are interleaved.
    func buildLedger(events target: Int) async throws -> String {
        let (directory, ledger) = try openScratchLedger(scratch: scratch, label: "ledger", mapSize: 1 << 32)
        var generator = SplitMix(seed: seed)
        let instances = max(1000, target / 20)
        let topics = try (0..<1000).map { try TopicName("topic-\($0)") }
        let tokens = try (0..<instances).map {
            try RegistrationToken("bench-\($0):APA91b\(seed)-\($0 &* 2_654_435_761)")
        }
        var appended = 0
        for chunk in stride(from: 0, to: instances, by: 5000) {
            let operations = tokens[chunk..<min(chunk + 5000, instances)].map {
                LedgerOperation.register($0, platform: "ios", appID: "com.example")
            }
            appended += operations.count
            _ = try await ledger.append(WriteRequest(actor: "bench", requestID: "reg-\(chunk)", operations: operations))
        }
        var request = 0
        while appended < target {
            var operations: [LedgerOperation] = []
            for _ in 0..<min(5000, target - appended) {
                let token = tokens[Int.random(in: 0..<instances, using: &generator)]
                // Topic popularity is skewed: low-numbered topics are much larger.
                let rank = Int(pow(Double.random(in: 0..<1, using: &generator), 3) * 1000)
                let topic = topics[min(rank, 999)]
                switch Int.random(in: 0..<100, using: &generator) {
                case 0..<75: operations.append(.subscribe(token, topic, via: .iid))
                case 75..<95: operations.append(.unsubscribe(token, topic, via: .v1))
                default:
                    operations.append(
                        .send(.topic(topic), precedence: .leftToRight, messageJSON: Array(#"{"data":{"k":"v"}}"#.utf8)))
                }
            }
            request += 1
            let receipt = try await ledger.append(
                WriteRequest(actor: "bench", requestID: "ops-\(request)", operations: operations))
            // What appended an event: an unsubscribe of a pair not subscribed, or a repeated subscribe, appends
            // nothing, so counting operations would leave the ledger short of `target`.
            appended += receipt.outcomes.count(where: { $0.seq != nil })
        }
        ledger.close()
        return directory
    }

    /// `rebuild` events/s; baseline: a raw cursor walk over the same log (LMDB alone, no decode).
    func rebuildWorkload(directory: String) throws -> BenchResult {
        let ledger = try Ledger.open(dataDirectory: directory, project: .default, logger: silent)
        let start = ContinuousClock.now
        let events = try ledger.rebuildProjections()
        let rate = Double(events) / (ContinuousClock.now - start).seconds
        ledger.close()
        return BenchResult(
            name: "rebuild (\(events) events)", unit: "events/s", value: rate,
            baselineName: "raw log cursor walk", baseline: try rawScan(directory: directory),
            notes: "target ≥ 500,000 events/s")
    }

    /// Decoding the whole log (what `ledger log` and `verify` do before their own work); baseline: raw walk.
    func scanWorkload(directory: String, renderJSON: Bool) throws -> BenchResult {
        let ledger = try Ledger.open(
            dataDirectory: directory, project: .default, options: Ledger.Options(mode: .readOnly), logger: silent)
        var count = 0
        var bytes = 0
        let start = ContinuousClock.now
        try ledger.readLog { snapshot in
            try snapshot.forEachEvent { event, hash in
                if renderJSON {
                    bytes &+= EventJSON.line(event, prevHash: hash, hash: hash).utf8.count
                } else {
                    bytes &+= event.requestID.utf8.count
                }
                count += 1
                return true
            }
        }
        let rate = Double(count) / (ContinuousClock.now - start).seconds
        return BenchResult(
            name: renderJSON ? "log export: decode + JSON line" : "log scan: decode", unit: "events/s", value: rate,
            baselineName: "raw log cursor walk", baseline: try rawScan(directory: directory),
            notes: renderJSON ? "\(bytes / max(count, 1)) B per line" : "")
    }

    func rawScan(directory: String) throws -> Double {
        let environment = try LMDBEnvironment(
            path: directory + "/" + ProjectID.default.rawValue,
            options: {
                var options = LMDBEnvironment.Options(); options.readOnly = true; return options
            }())
        var count = 0
        var checksum = 0
        let start = ContinuousClock.now
        try environment.read { txn in
            try txn.withCursor(try txn.openDatabase("log")) { cursor in
                try cursor.forEach { entry in
                    checksum &+= entry.value.count
                    count += 1
                    return true
                }
            }
        }
        precondition(checksum > 0)
        return Double(count) / (ContinuousClock.now - start).seconds
    }

    // MARK: Output

    func printTable(_ results: [BenchResult], _ sections: [Section]) {
        print("workload | value | baseline | ratio | notes")
        print("---|---|---|---|---")
        for result in results {
            print(
                "\(result.name) | \(format(result.value)) \(result.unit) | \(result.baselineName): "
                    + "\(format(result.baseline)) | \(String(format: "%.0f", result.ratio * 100)) % | \(result.notes)")
        }
        print()
        print("workload | wall time | peak RSS of the harness (servers: see their rows)")
        print("---|---|---")
        for section in sections {
            print("\(section.name) | \(String(format: "%.1f", section.seconds)) s | \(section.peakRSS / 1_048_576) MiB")
        }
    }

    func format(_ value: Double) -> String {
        value >= 10_000 ? String(format: "%.0f", value) : String(format: value < 10 ? "%.2f" : "%.1f", value)
    }

    func scratchDirectory(_ label: String) -> String { LedgerBench.scratchDirectory(in: scratch, label: label) }

    /// A fresh directory name under `scratch` for one workload's files.
    static func scratchDirectory(in scratch: String, label: String) -> String {
        (scratch as NSString).appendingPathComponent("ledger-bench-\(label)-\(UUID().uuidString)")
    }
}

/// A new ledger under `scratch` for a workload to fill, its map sized up front for bulk building (map
/// growth itself is tested through the public entry points, not here).
func openScratchLedger(scratch: String, label: String, mapSize: Int = 1 << 34) throws -> (
    directory: String, ledger: Ledger
) {
    let directory = LedgerBench.scratchDirectory(in: scratch, label: label)
    var options = Ledger.Options()
    options.environment.mapSize = mapSize
    return (directory, try Ledger.open(dataDirectory: directory, project: .default, options: options, logger: silent))
}

/// One workload's wall time and the harness's peak RSS while it ran.
struct Section {
    var name: String
    var seconds: Double
    var peakRSS: Int
    var dictionary: [String: Any] { ["name": name, "seconds": seconds, "peakRSSBytes": peakRSS] }
}

struct BenchResult {
    var name: String
    var unit: String
    var value: Double
    var baselineName: String
    var baseline: Double
    var notes: String
    var ratio: Double { value / baseline }

    var dictionary: [String: Any] {
        [
            "name": name, "unit": unit, "value": value, "baselineName": baselineName, "baseline": baseline,
            "ratio": ratio, "notes": notes,
        ]
    }
}

let silent: Logger = {
    var logger = Logger(label: "bench")
    logger.logLevel = .critical
    return logger
}()

extension Duration {
    var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}

struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Resets this process's peak RSS to its current RSS (Linux: writing 5 to /proc/self/clear_refs).
func resetPeakRSS() {
    try? "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
}

/// Peak resident set size (VmHWM) of a process, `self` by default, in bytes.
func peakRSS(of process: String = "self") -> Int { statusKilobytes("VmHWM:", of: process) * 1024 }

/// The resident set size (VmRSS) of process `pid` now, in bytes.
func residentBytes(of pid: Int32) -> Int { statusKilobytes("VmRSS:", of: String(pid)) * 1024 }

/// A `kB` field of /proc/PROCESS/status (0 when unreadable).
func statusKilobytes(_ field: String, of process: String) -> Int {
    guard let status = try? String(contentsOfFile: "/proc/\(process)/status", encoding: .utf8) else { return 0 }
    for line in status.split(separator: "\n") where line.hasPrefix(field) {
        return Int(line.split(separator: " ").dropFirst().first ?? "0") ?? 0
    }
    return 0
}

func machineDescription() -> String {
    let cpu = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8))?.split(separator: "\n")
        .first { $0.hasPrefix("model name") }?.split(separator: ":").last?.trimmingCharacters(in: .whitespaces)
    return
        "\(ProcessInfo.processInfo.activeProcessorCount) cores, \(ProcessInfo.processInfo.physicalMemory >> 30) GiB, \(cpu ?? "unknown CPU")"
}
