import Foundation
import LedgerCore
import LedgerStore

/// Writes during an expiry sweep: the p99 of single subscriptions from 8 writers while 100,000 silent devices
/// are expired as the server's sweeper does it (one read of the silent ones, then unregistrations in commits
/// of 1,000), against the same writers with no sweep.
struct ExpiryWorkload {
    let silentDevices: Int
    let writes: Int
    let seed: UInt64
    let scratch: String

    func run() async throws -> [BenchResult] {
        let (directory, ledger) = try openScratchLedger(scratch: scratch, label: "expiry")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        defer { ledger.close() }
        let now = LedgerTime.now()
        let longAgo = LedgerTime(microseconds: now.microseconds - 300 * 86_400 * 1_000_000)
        let silent = try (0..<silentDevices).map { try RegistrationToken("silent-\($0):APA91b\($0)") }
        for chunk in stride(from: 0, to: silentDevices, by: 10_000) {
            _ = try await ledger.append(
                WriteRequest(
                    actor: "bench", requestID: "s\(chunk)", time: longAgo,
                    operations: silent[chunk..<min(chunk + 10_000, silentDevices)].map {
                        .register($0, platform: nil, appID: nil)
                    }))
        }
        let writers = try (0..<8).map { try RegistrationToken("writer-\($0):APA91b\($0)") }
        _ = try await ledger.append(
            WriteRequest(
                actor: "bench", requestID: "w", operations: writers.map { .register($0, platform: nil, appID: nil) }))

        let quiet = try await latencies(ledger, writers: writers, round: 0)
        async let swept = sweep(ledger, before: now.microseconds / 1_000_000 - 270 * 86_400)
        let during = try await latencies(ledger, writers: writers, round: 1)
        let (expired, sweepSeconds) = try await swept
        guard expired == silentDevices else { throw BenchError("the sweep expired \(expired) of \(silentDevices)") }
        return [
            BenchResult(
                name: "write p99 during an expiry sweep of \(silentDevices) devices", unit: "ms",
                value: percentile(during, 0.99) * 1000, baselineName: "write p99, no sweep",
                baseline: percentile(quiet, 0.99) * 1000,
                notes: "8 writers × single subscriptions (\(writes) each run); the sweep took "
                    + "\(String(format: "%.1f", sweepSeconds)) s (one read, then commits of 1,000); p50 "
                    + "\(String(format: "%.2f", percentile(during, 0.5) * 1000)) ms during, "
                    + "\(String(format: "%.2f", percentile(quiet, 0.5) * 1000)) ms without")
        ]
    }

    /// Each of `writes` single subscriptions' latency, from 8 concurrent writers.
    private func latencies(_ ledger: Ledger, writers: [RegistrationToken], round: Int) async throws -> [Double] {
        try await withThrowingTaskGroup(of: [Double].self) { group in
            for (index, token) in writers.enumerated() {
                group.addTask {
                    var seconds: [Double] = []
                    for step in 0..<(writes / writers.count) {
                        let topic = try TopicName("r\(round)-w\(index)-\(step)")
                        let start = ContinuousClock.now
                        _ = try await ledger.append(
                            WriteRequest(
                                actor: "bench", requestID: "x", operations: [.subscribe(token, topic, via: .v1)]))
                        seconds.append((ContinuousClock.now - start).seconds)
                    }
                    return seconds
                }
            }
            var all: [Double] = []
            for try await part in group { all += part }
            return all
        }
    }

    /// What `RegistrationExpirySweeper.sweep` does: one read of the silent devices, then commits of 1,000.
    private func sweep(_ ledger: Ledger, before cutoff: Int64) async throws -> (Int, Double) {
        let start = ContinuousClock.now
        let silent = try ledger.silentRegistrations(before: cutoff, limit: 100_000)
        var expired = 0
        for chunk in stride(from: 0, to: silent.count, by: 1000) {
            let receipt = try await ledger.append(
                WriteRequest(
                    actor: "expiry", requestID: "e\(chunk)",
                    operations: silent[chunk..<min(chunk + 1000, silent.count)].map {
                        .unregister($0.token, reason: "expired: bench")
                    }))
            expired += receipt.outcomes.count(where: { $0.seq != nil })
        }
        return (expired, (ContinuousClock.now - start).seconds)
    }
}
