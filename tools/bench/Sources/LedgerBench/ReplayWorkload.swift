import Foundation
import LedgerCore
import LedgerQueries
import LedgerStore

/// `ledger replay` of one message with a 5-operand condition, in a large ledger and in a small one with the
/// same instances and the same operand topic sizes: the cost should follow the topics involved, not the
/// log's length. `--naive` (folding the log) beside it.
struct ReplayWorkload {
    let instances: Int
    /// Events of the large ledger; the small one has only the registrations, the operand subscriptions and
    /// the send.
    let largeEvents: Int
    let seed: UInt64
    let scratch: String
    let ledgerBinary: String

    static let condition =
        "'op-a' in topics && ('op-b' in topics || 'op-c' in topics) && !('op-d' in topics) || 'op-e' in topics"
    /// Members of each operand topic, as fractions of the instances.
    static let operandShares: [(String, Double)] = [
        ("op-a", 0.2), ("op-b", 0.1), ("op-c", 0.05), ("op-d", 0.02), ("op-e", 0.01),
    ]

    struct Built {
        let directory: String
        let messageID: UInt64
        let events: UInt64
        let buildSeconds: Double
    }

    func run() async throws -> [BenchResult] {
        let small = try await build(churnEvents: 0)
        defer { try? FileManager.default.removeItem(atPath: small.directory) }
        let operandEvents = Int(Double(instances) * Self.operandShares.map(\.1).reduce(0, +))
        let large = try await build(churnEvents: max(0, largeEvents - instances - operandEvents - 2))
        defer { try? FileManager.default.removeItem(atPath: large.directory) }
        let (smallIndex, smallCount) = try measureInProcess(small, naive: false)
        let (largeIndex, largeCount) = try measureInProcess(large, naive: false)
        precondition(smallCount == largeCount, "the two ledgers must give the same audience")
        let smallCLI = try measureCLI(small)
        let largeCLI = try measureCLI(large)
        let (largeNaive, naiveCount) = try measureInProcess(large, naive: true, runs: 1)
        precondition(naiveCount == largeCount, "--naive disagrees with the index")
        let (smallNaive, _) = try measureInProcess(small, naive: true, runs: 1)
        let sizes = "\(instances) instances, \(largeCount) recipients"
        return [
            BenchResult(
                name: "replay, \(large.events)-event ledger (in process)", unit: "ms", value: largeIndex * 1000,
                baselineName: "same message, \(small.events)-event ledger", baseline: smallIndex * 1000,
                notes: "\(sizes); target ≤ 1 s and ≤ 2× (ratio ≤ 200 %); ledger built at "
                    + "\(Int(Double(large.events) / large.buildSeconds)) events/s"),
            BenchResult(
                name: "`ledger replay --format json`, \(large.events)-event ledger", unit: "ms",
                value: largeCLI * 1000, baselineName: "same, \(small.events)-event ledger", baseline: smallCLI * 1000,
                notes: "whole process: start, open, replay, JSON of every recipient to /dev/null"),
            BenchResult(
                name: "replay --naive, \(large.events)-event ledger", unit: "ms", value: largeNaive * 1000,
                baselineName: "replay from the index, same ledger", baseline: largeIndex * 1000,
                notes: "folds the log up to the send in memory; \(small.events)-event ledger: "
                    + "\(Int(smallNaive * 1000)) ms"),
        ]
    }

    /// A ledger of `instances` registrations, the operand topics' members, `churnEvents / 2` subscription
    /// changes on 1,000 other topics, the send, then the rest of the churn.
    func build(churnEvents: Int) async throws -> Built {
        let (directory, ledger) = try openScratchLedger(scratch: scratch, label: "replay")
        let start = ContinuousClock.now
        var generator = SplitMix(seed: seed)
        let tokens = try (0..<instances).map {
            try RegistrationToken("rep-\($0 &* 2_654_435_761 % 1_000_003):APA91b\($0)")
        }
        var request = 0
        func append(_ operations: [LedgerOperation]) async throws -> WriteReceipt {
            request += 1
            return try await ledger.append(
                WriteRequest(actor: "bench", requestID: "b\(request)", operations: operations))
        }
        for chunk in stride(from: 0, to: instances, by: 10_000) {
            _ = try await append(
                tokens[chunk..<min(chunk + 10_000, instances)].map { .register($0, platform: "ios", appID: nil) })
        }
        // The operand topics: the same members in both ledgers (the generator is reseeded per topic).
        for (index, (name, share)) in Self.operandShares.enumerated() {
            var topicGenerator = SplitMix(seed: seed &+ UInt64(index) &* 7919)
            let topic = try TopicName(name)
            var members = Set<Int>()
            let count = Int(Double(instances) * share)
            while members.count < count { members.insert(Int.random(in: 0..<instances, using: &topicGenerator)) }
            let sorted = members.sorted()
            for chunk in stride(from: 0, to: sorted.count, by: 10_000) {
                _ = try await append(
                    sorted[chunk..<min(chunk + 10_000, sorted.count)].map { .subscribe(tokens[$0], topic, via: .iid) })
            }
        }
        let fillers = try (0..<1000).map { try TopicName("filler-\($0)") }
        func churn(_ count: Int) async throws {
            var done = 0
            while done < count {
                let operations: [LedgerOperation] = (0..<min(10_000, count - done)).map { _ in
                    let token = tokens[Int.random(in: 0..<instances, using: &generator)]
                    let topic = fillers[Int.random(in: 0..<1000, using: &generator)]
                    return Bool.random(using: &generator)
                        ? .subscribe(token, topic, via: .iid) : .unsubscribe(token, topic, via: .v1)
                }
                // Counted by what appended: an unsubscribe of a pair not subscribed, or a repeated subscribe,
                // appends nothing.
                done += try await append(operations).outcomes.count(where: { $0.seq != nil })
            }
        }
        try await churn(churnEvents / 2)
        let receipt = try await append([
            .send(.condition(Self.condition), precedence: .leftToRight, messageJSON: Array(#"{"data":{"k":"v"}}"#.utf8))
        ])
        guard case .sent(_, let messageID) = receipt.outcomes[0] else { throw BenchError("the send was refused") }
        try await churn(churnEvents - churnEvents / 2)
        ledger.waitForAudiences()
        let events = try ledger.readLog { try $0.head().seq }
        ledger.close()
        return Built(
            directory: directory, messageID: messageID, events: events,
            buildSeconds: (ContinuousClock.now - start).seconds)
    }

    /// The median time of `MessageReplay.replay` (a fresh snapshot each run) and the recipient count.
    func measureInProcess(_ built: Built, naive: Bool, runs: Int = 5) throws -> (Double, Int) {
        let ledger = try Ledger.open(
            dataDirectory: built.directory, project: .default, options: Ledger.Options(mode: .readOnly),
            logger: silent)
        defer { ledger.close() }
        var count = 0
        let seconds = try median(runs: runs) {
            let replay = try ledger.read { try MessageReplay.replay(built.messageID, in: $0, naive: naive) }
            guard let replay, replay.matchesRecord else { throw BenchError("the replay does not match its record") }
            count = replay.recipientCount
        }
        return (seconds, count)
    }

    /// The median wall time of the `ledger replay` process, JSON to /dev/null.
    func measureCLI(_ built: Built) throws -> Double {
        try median(runs: 3) {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: ledgerBinary)
            process.arguments = [
                "replay", "--data", built.directory, "--message", String(built.messageID), "--format", "json",
            ]
            process.standardOutput = FileHandle.nullDevice
            try process.run()
            process.waitUntilExit()
            guard process.terminationStatus == 0 else {
                throw BenchError("ledger replay exited \(process.terminationStatus)")
            }
        }
    }
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
