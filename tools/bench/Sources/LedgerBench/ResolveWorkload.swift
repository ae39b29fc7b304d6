import Foundation
import LedgerCore
import LedgerQueries
import LedgerStore

/// Resolving a batchAdd's 1,000 tokens to instance ids before it is queued (what the server does on its
/// pool for every large request): `LedgerSnapshot.instanceIDs(of:)`, which looks them up in the tree's key
/// order through one cursor, against one `instanceID(of:)` per token in request order — in the same run, on
/// the same ledger, alternating batch by batch. Twice: at the HTTP benchmark's 8,000 devices (where
/// consecutive sorted lookups often share a page) and at a million (where they rarely do).
struct ResolveWorkload {
    let scratch: String
    let seed: UInt64
    /// Batches timed for each way, alternately.
    let batches: Int

    func run(devices: [Int]) async throws -> [BenchResult] {
        var results: [BenchResult] = []
        for count in devices { results.append(try await measure(devices: count)) }
        return results
    }

    private func measure(devices: Int) async throws -> BenchResult {
        let (directory, ledger) = try openScratchLedger(scratch: scratch, label: "resolve-\(devices)")
        defer {
            ledger.close()
            try? FileManager.default.removeItem(atPath: directory)
        }
        var generator = SplitMix(seed: seed)
        // Shaped like the tokens the server issues: 22 characters, ":APA91b", 134 more.
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        func random(_ count: Int) -> String {
            String(decoding: (0..<count).map { _ in alphabet[Int(generator.next() % 64)] }, as: UTF8.self)
        }
        let tokens = try (0..<devices).map { _ in try RegistrationToken(random(22) + ":APA91b" + random(134)) }
        for chunk in stride(from: 0, to: devices, by: 5000) {
            let operations = tokens[chunk..<min(chunk + 5000, devices)].map {
                LedgerOperation.register($0, platform: nil, appID: nil)
            }
            _ = try await ledger.append(WriteRequest(actor: "bench", requestID: "reg-\(chunk)", operations: operations))
        }
        var sorted = Duration.zero
        var inOrder = Duration.zero
        let clock = ContinuousClock()
        for batch in 0..<(2 * batches) {
            let asked: [RegistrationToken?] = (0..<1000).map { _ in tokens[Int(generator.next() % UInt64(devices))] }
            let resolved = try ledger.read { snapshot in
                if batch % 2 == 0 {
                    var ids: [InstanceID?] = []
                    sorted += try clock.measure { ids = try snapshot.instanceIDs(of: asked) }
                    return ids
                }
                var ids: [InstanceID?] = []
                inOrder += try clock.measure {
                    ids = try asked.map { token in try token.flatMap { try snapshot.instanceID(of: $0) } }
                }
                return ids
            }
            guard resolved.allSatisfy({ $0 != nil }) else { throw BenchError("a registered token did not resolve") }
        }
        let lookups = Double(batches * 1000)
        return BenchResult(
            name: "batch token resolution, 1000 tokens, \(devices) devices, in key order", unit: "tokens/s",
            value: lookups / sorted.seconds, baselineName: "one lookup per token in request order",
            baseline: lookups / inOrder.seconds, notes: "ratio > 1: key order pays for its sort")
    }
}
