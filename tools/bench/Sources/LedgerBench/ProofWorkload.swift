import Crypto
import Foundation
import LedgerCore
import LedgerQueries
import LedgerStore

/// Proof generation (≤ 10 ms at 10M events) in a large ledger, against the same proofs in a small
/// one: a Merkle proof is O(log n) reads, so 100× the events should cost a few more hashes, not 100× the time.
///
/// Each ledger is built through the durable append path: 100k instances churning subscriptions on 1,000
/// topics, with a send to a small topic every 1,000 events (so its audience is recorded too). Timed, per
/// run, with a fresh read snapshot each:
/// - a message proof of a random message (its `sent` and `audience` events with their inclusion proofs
///   against the head, rendered as the route's JSON) — what `GET …/messages/{id}:proof` does per request;
/// - a consistency proof from a random older size to the head, as JSON;
/// - a checkpoint: the head's root and its Ed25519 signature.
/// Every proof made is checked with ``LedgerProofs/verify(_:key:)`` (untimed), so a fast wrong proof fails
/// the run.
struct ProofWorkload {
    let largeEvents: Int
    let smallEvents: Int
    let seed: UInt64
    let scratch: String
    let runs = 200

    struct Built {
        let directory: String
        let messages: [UInt64]
        let events: UInt64
        let buildSeconds: Double
    }

    struct Timings {
        var message: [Double] = []
        var consistency: [Double] = []
        var checkpoint: [Double] = []
    }

    func run() async throws -> [BenchResult] {
        let small = try await build(events: smallEvents)
        defer { try? FileManager.default.removeItem(atPath: small.directory) }
        let large = try await build(events: largeEvents)
        defer { try? FileManager.default.removeItem(atPath: large.directory) }
        let key = try NoteSigner(name: "bench/proofs", key: Curve25519.Signing.PrivateKey())
        let smallTimes = try measure(small, key: key)
        let largeTimes = try measure(large, key: key)
        let built = "ledger built at \(Int(Double(large.events) / large.buildSeconds)) events/s"
        func result(_ name: String, _ inLarge: [Double], _ inSmall: [Double], _ notes: String) -> [BenchResult] {
            [
                BenchResult(
                    name: "\(name), \(self.events(large.events)) events, median", unit: "ms",
                    value: percentile(inLarge, 0.5) * 1000,
                    baselineName: "same, \(self.events(small.events))-event ledger",
                    baseline: percentile(inSmall, 0.5) * 1000, notes: notes),
                BenchResult(
                    name: "\(name), \(self.events(large.events)) events, p99", unit: "ms",
                    value: percentile(inLarge, 0.99) * 1000,
                    baselineName: "same, \(self.events(small.events))-event ledger",
                    baseline: percentile(inSmall, 0.99) * 1000, notes: "\(runs) runs; max \(format(inLarge.max()))"),
            ]
        }
        return result(
            "message proof (sent + audience, JSON)", largeTimes.message, smallTimes.message,
            "target ≤ 10 ms at 10M events; \(built)")
            + result(
                "consistency proof to the head (JSON)", largeTimes.consistency, smallTimes.consistency,
                "from a random older size")
            + result("checkpoint (root + Ed25519 signature)", largeTimes.checkpoint, smallTimes.checkpoint, "")
    }

    func events(_ count: UInt64) -> String {
        count >= 1_000_000 ? String(format: "%.1fM", Double(count) / 1e6) : "\(count)"
    }

    func format(_ seconds: Double?) -> String { String(format: "%.3f ms", (seconds ?? 0) * 1000) }

    func build(events target: Int) async throws -> Built {
        let (directory, ledger) = try openScratchLedger(scratch: scratch, label: "proofs")
        let start = ContinuousClock.now
        var generator = SplitMix(seed: seed)
        let instances = min(100_000, max(1_000, target / 20))
        let tokens = try (0..<instances).map { try RegistrationToken("proof-\($0):APA91b\($0 &* 2_654_435_761)") }
        let topics = try (0..<1000).map { try TopicName("topic-\($0)") }
        var appended = 0
        var request = 0
        var messages: [UInt64] = []
        var member = [UInt64](repeating: 0, count: (instances * 1000 + 63) / 64)
        func append(_ operations: [LedgerOperation]) async throws {
            request += 1
            let receipt = try await ledger.append(
                WriteRequest(actor: "bench", requestID: "p\(request)", operations: operations))
            appended += receipt.outcomes.filter { $0.seq != nil }.count
            for case .sent(_, let id) in receipt.outcomes { messages.append(id) }
        }
        for chunk in stride(from: 0, to: instances, by: 10_000) {
            try await append(
                tokens[chunk..<min(chunk + 10_000, instances)].map { .register($0, platform: "ios", appID: nil) })
        }
        while appended < target {
            var operations: [LedgerOperation] = []
            for index in 0..<min(10_000, max(1, target - appended)) {
                if index % 1000 == 999 {
                    // Topics 900–999 hold few members: recording their audiences stays cheap.
                    let topic = topics[900 + Int.random(in: 0..<100, using: &generator)]
                    operations.append(
                        .send(.topic(topic), precedence: .leftToRight, messageJSON: Array(#"{"data":{"k":"v"}}"#.utf8)))
                    continue
                }
                // Each change flips a pair's membership, so that every operation appends an event (a
                // re-subscribe or a missing unsubscribe would append nothing).
                let instance = Int.random(in: 0..<instances, using: &generator)
                let topic = min(999, Int(pow(Double.random(in: 0..<1, using: &generator), 2) * 1000))
                let pair = instance * 1000 + topic
                let subscribed = member[pair >> 6] & (1 << (pair & 63)) != 0
                member[pair >> 6] ^= 1 << (pair & 63)
                operations.append(
                    subscribed
                        ? .unsubscribe(tokens[instance], topics[topic], via: .v1)
                        : .subscribe(tokens[instance], topics[topic], via: .iid))
            }
            try await append(operations)
        }
        ledger.waitForAudiences()
        let events = try ledger.readLog { try $0.head().seq }
        ledger.close()
        guard !messages.isEmpty else { throw BenchError("the proof ledger has no messages") }
        return Built(
            directory: directory, messages: messages, events: events,
            buildSeconds: (ContinuousClock.now - start).seconds)
    }

    func measure(_ built: Built, key: NoteSigner) throws -> Timings {
        let ledger = try Ledger.open(
            dataDirectory: built.directory, project: .default, options: Ledger.Options(mode: .readOnly),
            logger: silent)
        defer { ledger.close() }
        let origin = "bench/proofs"
        let note = try ledger.read { snapshot in
            try key.sign(Checkpoint(origin: origin, size: built.events, root: try snapshot.merkleTree().root()))
        }
        var generator = SplitMix(seed: seed &+ 17)
        var timings = Timings()
        for _ in 0..<runs {
            let message = built.messages[Int.random(in: 0..<built.messages.count, using: &generator)]
            var start = ContinuousClock.now
            let proof = try ledger.read { snapshot in
                guard
                    let proof = try LedgerProofs.messageProof(
                        message, in: snapshot, checkpoint: note, size: built.events)
                else { throw BenchError("message \(message) has no proof") }
                return try AuditJSON.data(proof)
            }
            timings.message.append((ContinuousClock.now - start).seconds)
            try check(proof, key: key, expecting: 2)

            let from = UInt64.random(in: 1...built.events, using: &generator)
            start = ContinuousClock.now
            let consistency = try ledger.read { snapshot in
                try AuditJSON.data(try LedgerProofs.consistencyProof(from: from, to: built.events, in: snapshot))
            }
            timings.consistency.append((ContinuousClock.now - start).seconds)
            try check(consistency, key: key, expecting: nil)

            start = ContinuousClock.now
            let signed = try ledger.read { snapshot in
                let tree = try snapshot.merkleTree()
                return try key.sign(Checkpoint(origin: origin, size: tree.size, root: try tree.root()))
            }
            timings.checkpoint.append((ContinuousClock.now - start).seconds)
            guard signed == note else { throw BenchError("the checkpoint's root moved in a read-only ledger") }
        }
        return timings
    }

    /// Verifies a proof document as an auditor would (untimed): a wrong proof fails the benchmark.
    func check(_ data: Data, key: NoteSigner, expecting entries: Int?) throws {
        guard let document = try JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw BenchError("a proof is not a JSON object")
        }
        if let entries, (document["entries"] as? [Any])?.count != entries {
            throw BenchError("a message proof does not hold its sent and audience events")
        }
        do {
            _ = try LedgerProofs.verify(data, key: key.verifier)
        } catch {
            throw BenchError("a proof does not verify: \(error)")
        }
    }

    func percentile(_ values: [Double], _ fraction: Double) -> Double {
        let sorted = values.sorted()
        return sorted[min(sorted.count - 1, Int(Double(sorted.count) * fraction))]
    }
}
