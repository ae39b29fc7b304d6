import Foundation
import LedgerCore
import LedgerStore

/// The audience of a 5-operand condition with `!` over `instances` registered instances and 1,000 topics.
struct AudienceWorkload {
    let instances: Int
    let subscriptionsPerInstance: Int
    let seed: UInt64
    let scratch: String

    static let condition =
        "'topic-1' in topics && ('topic-2' in topics || 'topic-7' in topics) && !('topic-3' in topics) || 'topic-500' in topics"

    func run() async throws -> [BenchResult] {
        let directory = (scratch as NSString).appendingPathComponent("ledger-bench-audience-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var options = Ledger.Options()
        options.environment.mapSize = 1 << 33
        let ledger = try Ledger.open(dataDirectory: directory, project: .default, options: options, logger: silent)
        var generator = SplitMix(seed: seed)
        let topics = try (0..<1000).map { try TopicName("topic-\($0)") }
        let buildStart = ContinuousClock.now
        for chunk in stride(from: 0, to: instances, by: 10_000) {
            var operations: [LedgerOperation] = []
            for index in chunk..<min(chunk + 10_000, instances) {
                let token = try RegistrationToken("aud-\(index &* 2_654_435_761 % 1_000_003):APA91b\(index)")
                operations.append(.register(token, platform: "ios", appID: nil))
                for _ in 0..<subscriptionsPerInstance {
                    // Skewed popularity: topic k is chosen with probability falling like 1/k.
                    let rank = Int(exp(Double.random(in: 0..<log(1000.0), using: &generator)))
                    operations.append(.subscribe(token, topics[min(rank, 999)], via: .iid))
                }
            }
            _ = try await ledger.append(WriteRequest(actor: "bench", requestID: "aud-\(chunk)", operations: operations))
        }
        let buildSeconds = (ContinuousClock.now - buildStart).seconds
        let condition = try Condition(parsing: Self.condition, precedence: .leftToRight)
        var results: [BenchResult] = []
        try ledger.read { snapshot in
            let head = try snapshot.head().seq
            var count = 0
            let countTime = try median(runs: 9) {
                count = try snapshot.audience(of: condition).count
            }
            let universeTime = try median(runs: 9) { _ = try snapshot.universe().count }
            results.append(
                BenchResult(
                    name: "audience count, 5 operands with !, \(instances) instances", unit: "ms",
                    value: countTime * 1000, baselineName: "loading the universe alone", baseline: universeTime * 1000,
                    notes:
                        "\(count) recipients; target ≤ 20 ms; ledger of \(head) events built at \(Int(Double(head) / buildSeconds)) events/s"
                ))
            var tokens: [RegistrationToken] = []
            let recipients = try snapshot.audience(of: condition)
            let listTime = try median(runs: 3) { tokens = try snapshot.recipientTokens(recipients) }
            let digestTime = median(runs: 3) { _ = RecipientDigest.digest(sortedTokens: tokens) }
            results.append(
                BenchResult(
                    name: "audience full token list + digest", unit: "ms",
                    value: (countTime + listTime + digestTime) * 1000,
                    baselineName: "count only", baseline: countTime * 1000,
                    notes:
                        "\(tokens.count) tokens in byte order; listing \(String(format: "%.1f", listTime * 1000)) ms,"
                        + " digest \(String(format: "%.1f", digestTime * 1000)) ms"))
            let pastSeq = head / 2
            let pastTime = try median(runs: 5) { _ = try snapshot.audience(of: condition, at: pastSeq).count }
            results.append(
                BenchResult(
                    name: "audience count at a past seq (\(pastSeq))", unit: "ms", value: pastTime * 1000,
                    baselineName: "count now", baseline: countTime * 1000,
                    notes: "temporal index: current + closed intervals"))
            results.append(try representationComparison(snapshot: snapshot, condition: condition))
        }
        ledger.close()
        return results
    }

    /// The same condition over member lists already in memory: bitmaps versus sorted-array merges.
    func representationComparison(snapshot: LedgerSnapshot, condition: Condition) throws -> BenchResult {
        let capacity = try snapshot.instanceIDBound()
        var lists: [TopicName: [InstanceID]] = [:]
        for name in Set(condition.operands) {
            lists[name] = try snapshot.topicID(of: name).map { try snapshot.members(of: $0) } ?? []
        }
        let universeList = try snapshot.registeredInstances()
        var bitmaps: [TopicName: InstanceSet] = [:]
        for (name, list) in lists {
            var set = InstanceSet(capacity: capacity)
            for id in list { set.insert(id) }
            bitmaps[name] = set
        }
        var universe = InstanceSet(capacity: capacity)
        for id in universeList { universe.insert(id) }
        var bitmapCount = 0
        let bitmapTime = median(runs: 15) {
            bitmapCount = condition.audience(universe: universe) { bitmaps[$0]! }.count
        }
        var arrayCount = 0
        let arrayTime = median(runs: 15) {
            arrayCount = SortedArrayAlgebra.evaluate(condition, universe: universeList) { lists[$0]! }.count
        }
        precondition(bitmapCount == arrayCount, "representations disagree")
        return BenchResult(
            name: "set algebra in memory: bitmaps", unit: "ms", value: bitmapTime * 1000,
            baselineName: "sorted UInt32 array merges", baseline: arrayTime * 1000,
            notes: "operand sizes \(lists.values.map(\.count).sorted()), universe \(universeList.count)")
    }

    /// Conditions parsed per second (median of 7 rounds) against reading the same texts' characters.
    static func parseRate() -> BenchResult {
        let texts = [
            condition, "'TopicA' in topics && ('TopicB' in topics || 'TopicC' in topics)", "!('news' in topics)",
        ]
        let rounds = 100_000
        var parsed = 0
        let seconds = median(runs: 7) {
            for round in 0..<rounds {
                if (try? Condition(parsing: texts[round % texts.count], precedence: .leftToRight)) != nil {
                    parsed += 1
                }
            }
        }
        precondition(parsed == rounds * 7)
        var checksum = 0
        let scanSeconds = median(runs: 7) {
            for round in 0..<rounds {
                checksum &+= texts[round % texts.count].unicodeScalars.reduce(0) { $0 &+ Int($1.value) }
            }
        }
        precondition(checksum != 0)
        return BenchResult(
            name: "condition parse", unit: "conditions/s", value: Double(rounds) / seconds,
            baselineName: "reading the same texts' characters", baseline: Double(rounds) / scanSeconds,
            notes: "target ≥ 1,000,000/s")
    }
}

/// The sorted-array alternative to bitmaps, kept only to measure the choice.
enum SortedArrayAlgebra {
    static func evaluate(_ condition: Condition, universe: [InstanceID], members: (TopicName) -> [InstanceID])
        -> [InstanceID]
    {
        switch condition {
        case .topic(let name): return intersect(members(name), universe)
        case .not(let inner): return subtract(universe, evaluate(inner, universe: universe, members: members))
        case .and(let left, let right):
            return intersect(
                evaluate(left, universe: universe, members: members),
                evaluate(right, universe: universe, members: members))
        case .or(let left, let right):
            return union(
                evaluate(left, universe: universe, members: members),
                evaluate(right, universe: universe, members: members))
        }
    }

    static func intersect(_ a: [InstanceID], _ b: [InstanceID]) -> [InstanceID] {
        var result: [InstanceID] = []
        var i = 0, j = 0
        while i < a.count && j < b.count {
            if a[i] < b[j] { i += 1 } else if a[i] > b[j] { j += 1 } else { result.append(a[i]); i += 1; j += 1 }
        }
        return result
    }

    static func union(_ a: [InstanceID], _ b: [InstanceID]) -> [InstanceID] {
        var result: [InstanceID] = []
        result.reserveCapacity(a.count + b.count)
        var i = 0, j = 0
        while i < a.count || j < b.count {
            if j == b.count || (i < a.count && a[i] < b[j]) {
                result.append(a[i]); i += 1
            } else if i == a.count || b[j] < a[i] {
                result.append(b[j]); j += 1
            } else {
                result.append(a[i]); i += 1; j += 1
            }
        }
        return result
    }

    static func subtract(_ a: [InstanceID], _ b: [InstanceID]) -> [InstanceID] {
        var result: [InstanceID] = []
        var j = 0
        for value in a {
            while j < b.count && b[j] < value { j += 1 }
            if j == b.count || b[j] != value { result.append(value) }
        }
        return result
    }
}

/// The median wall time of `runs` runs of `body`, in seconds.
func median(runs: Int, _ body: () throws -> Void) rethrows -> Double {
    var times: [Double] = []
    for _ in 0..<runs {
        let start = ContinuousClock.now
        try body()
        times.append((ContinuousClock.now - start).seconds)
    }
    return times.sorted()[runs / 2]
}
