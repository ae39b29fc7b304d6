import Foundation
import LedgerCore
import LedgerQueries
import LedgerStore
import LMDBKit

/// The audience of a 5-operand condition with `!` over `instances` registered instances and 1,000 topics.
struct AudienceWorkload {
    let instances: Int
    let subscriptionsPerInstance: Int
    let seed: UInt64
    let scratch: String
    /// Also time the same audience on Redis and SQLite loaded with the same instances.
    var peers = false

    static let condition =
        "'topic-1' in topics && ('topic-2' in topics || 'topic-7' in topics) && !('topic-3' in topics) || 'topic-500' in topics"

    func run() async throws -> [BenchResult] {
        let directory = (scratch as NSString).appendingPathComponent("ledger-bench-audience-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var options = Ledger.Options()
        options.environment.mapSize = 1 << 33
        let ledger = try Ledger.open(dataDirectory: directory, project: .default, options: options, logger: silent)
        let topics = try (0..<1000).map { try TopicName("topic-\($0)") }
        let data = dataset()
        // The peers load the same subscriptions on the other core while the ledger is built.
        let peerAudience = peers ? PeerAudience(tokens: data.tokens, topics: data.topics, scratch: scratch) : nil
        defer { peerAudience?.stop() }
        let peersLoaded = Task { if let peerAudience { try await onThread { try peerAudience.load() } } }
        let buildStart = ContinuousClock.now
        for chunk in stride(from: 0, to: instances, by: 10_000) {
            var operations: [LedgerOperation] = []
            for index in chunk..<min(chunk + 10_000, instances) {
                let token = try RegistrationToken(data.tokens[index])
                operations.append(.register(token, platform: "ios", appID: nil))
                for number in data.topics[index] { operations.append(.subscribe(token, topics[number], via: .iid)) }
            }
            _ = try await ledger.append(WriteRequest(actor: "bench", requestID: "aud-\(chunk)", operations: operations))
        }
        let buildSeconds = (ContinuousClock.now - buildStart).seconds
        try await peersLoaded.value  // nothing else runs while anything is timed
        let condition = try Condition(parsing: Self.condition, precedence: .leftToRight)
        var results: [BenchResult] = []
        var ours = (count: 0, countSeconds: 0.0, listSeconds: 0.0)
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
            // What the audience recorder hashes for this send: the device numbers (version 2) against the tokens
            // walked from the `tokens` database in byte order (version 1, what layout 9 recorded).
            let byDevices = try median(runs: 5) { _ = try snapshot.recipientDigest(recipients, version: .devices) }
            let byTokens = try median(runs: 3) { _ = try snapshot.recipientDigest(recipients, version: .tokens) }
            results.append(
                BenchResult(
                    name: "recorded audience digest over device numbers (v2)", unit: "ms", value: byDevices * 1000,
                    baselineName: "over tokens walked from the index (v1)", baseline: byTokens * 1000,
                    notes: "\(recipients.count) recipients; the members read beforehand"))
            let pastSeq = head / 2
            let pastTime = try median(runs: 5) { _ = try snapshot.audience(of: condition, at: pastSeq).count }
            results.append(
                BenchResult(
                    name: "audience count at a past seq (\(pastSeq))", unit: "ms", value: pastTime * 1000,
                    baselineName: "count now", baseline: countTime * 1000,
                    notes: "temporal index: current + closed intervals"))
            results.append(try representationComparison(snapshot: snapshot, condition: condition))
            ours = (count, countTime, countTime + listTime)
        }
        ledger.close()
        if let peerAudience { results += try peerComparison(peerAudience, ours: ours) }
        return results
    }

    /// The same audience on Redis and SQLite holding the same subscriptions; each must find the same count.
    func peerComparison(_ peer: PeerAudience, ours: (count: Int, countSeconds: Double, listSeconds: Double))
        throws -> [BenchResult]
    {
        let (redis, sqlite) = try peer.measure(countRuns: 5)
        for (name, timing) in [("Redis", redis), ("SQLite", sqlite)] where timing.count != ours.count {
            throw PeerError("\(name) found \(timing.count) recipients, the ledger \(ours.count)")
        }
        let faster = "ratio < 100 %: TopicLedger is faster"
        return [
            BenchResult(
                name: "peer: audience count vs Redis", unit: "ms", value: ours.countSeconds * 1000,
                baselineName: "Redis 7 Lua SUNIONSTORE/SINTERSTORE/SDIFFSTORE + SCARD",
                baseline: redis.countSeconds * 1000,
                notes:
                    "\(redis.count) recipients, same in all three; redis-server RSS \(redis.residentBytes >> 20) MiB; \(faster)"
            ),
            BenchResult(
                name: "peer: audience token list vs Redis", unit: "ms", value: ours.listSeconds * 1000,
                baselineName: "the same script + SMEMBERS, sorted to byte order", baseline: redis.listSeconds * 1000,
                notes: faster),
            BenchResult(
                name: "peer: audience count vs SQLite", unit: "ms", value: ours.countSeconds * 1000,
                baselineName: "SQLite WAL INTERSECT/EXCEPT/UNION count(*)", baseline: sqlite.countSeconds * 1000,
                notes: "subscriptions(topic, token) primary key; \(faster)"),
            BenchResult(
                name: "peer: audience token list vs SQLite", unit: "ms", value: ours.listSeconds * 1000,
                baselineName: "the same query ORDER BY token", baseline: sqlite.listSeconds * 1000, notes: faster),
        ]
    }

    /// The generated instances, the same for every store that loads them: tokens, and each one's topic numbers
    /// (`topic-N`, N < 1000), popularity skewed so topic k is chosen with probability falling like 1/k.
    func dataset() -> (tokens: [String], topics: [[Int]]) {
        var generator = SplitMix(seed: seed)
        var tokens: [String] = []
        var topics: [[Int]] = []
        tokens.reserveCapacity(instances)
        topics.reserveCapacity(instances)
        for index in 0..<instances {
            tokens.append("aud-\(index &* 2_654_435_761 % 1_000_003):APA91b\(index)")
            topics.append(
                (0..<subscriptionsPerInstance).map { _ in
                    min(Int(exp(Double.random(in: 0..<log(1000.0), using: &generator))), 999)
                })
        }
        return (tokens, topics)
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
