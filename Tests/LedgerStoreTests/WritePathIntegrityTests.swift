import Foundation
import LMDBKit
import LedgerCore
@testable import LedgerStore
import LedgerTestSupport
import Testing
import LedgerQueries

/// Every request is all or nothing, at every LMDB limit: long names, a filling map, failing calls.
@Suite("Write path integrity", .offThePool)
struct WritePathIntegrityTests {
    static let longTopic = try! TopicName(String(repeating: "q", count: TopicName.maximumLength))

    @Test("900-character topics and 4096-byte tokens: stored, audited, replayed with the right digest, rebuilt")
    func longNames() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        // Long tokens sharing a 4095-byte prefix (order decided by the last byte), one over the key limit by a
        // little, and short ones on both sides of them in byte order.
        let prefix = String(repeating: "L", count: 4095)
        let long = try ["\(prefix)L", "\(prefix)A", String(repeating: "M", count: 600)].map {
            try RegistrationToken($0)
        }
        let short = try ["A-short", "La-short", "z-short"].map { try RegistrationToken($0) }
        let bystanders = try (0..<200).map { try RegistrationToken("bystander-\($0)") }
        let everyone = long + short + bystanders
        let shortTopic = try TopicName("short")
        _ = try await ledger.append(
            WriteRequest(
                actor: "t", requestID: "reg", operations: everyone.map { .register($0, platform: "ios", appID: nil) }))
        let subscribed = try await ledger.append(
            WriteRequest(
                actor: "t", requestID: "sub",
                operations: (long + short).map { .subscribe($0, Self.longTopic, via: .v1) }
                    + long.map { .subscribe($0, shortTopic, via: .iid) }))
        #expect(subscribed.outcomes.allSatisfy { $0.seq != nil })
        // A second subscribe of a long name finds the first (no duplicate key, no new event).
        let again = try await ledger.append(
            WriteRequest(actor: "t", requestID: "again", operations: [.subscribe(long[0], Self.longTopic, via: .v1)]))
        #expect(again.outcomes == [.unchanged])
        let sent = try await ledger.append(
            WriteRequest(
                actor: "t", requestID: "send",
                operations: [
                    .send(.topic(Self.longTopic), precedence: .leftToRight, messageJSON: Array("{}".utf8)),
                    .send(.topic(shortTopic), precedence: .leftToRight, messageJSON: Array("{}".utf8)),
                    .send(.token(long[0]), precedence: .leftToRight, messageJSON: Array("{}".utf8)),
                ]))
        ledger.waitForAudiences()
        let messageIDs = sent.outcomes.compactMap { outcome -> UInt64? in
            if case .sent(_, let id) = outcome { return id }
            return nil
        }
        #expect(messageIDs.count == 3)
        let expected = [(long + short).sorted(), long.sorted(), [long[0]]]
        for (messageID, recipients) in zip(messageIDs, expected) {
            let replay = try #require(try ledger.read { try MessageReplay.replay(messageID, in: $0) })
            #expect(replay.recipients == recipients)
            // Everyone registered in order: `everyone[i]` is device i + 1.
            let devices = recipients.map { everyone.firstIndex(of: $0)! + 1 }
            #expect(replay.devices.map { Int($0) } == devices)
            #expect(Hex.encode(replay.recipientDigest) == deviceDigestHex(devices))
            #expect(replay.matchesRecord)
            // The version-1 digest walks the `tokens` database, long keys merged at their place in byte order.
            var set = InstanceSet(capacity: everyone.count + 1)
            for device in replay.devices { set.insert(device) }
            let byTokens = try ledger.read { try $0.recipientDigest(set, version: .tokens) }
            #expect(byTokens.digest == RecipientDigest.digest(sortedTokens: recipients))
        }
        try ledger.read { snapshot throws in
            let topics = try snapshot.topicsWithCounts()
            #expect(topics.map(\.topic) == [Self.longTopic, shortTopic].sorted())
            #expect(topics.map(\.subscribers) == [6, 3])
            let instance = try #require(try snapshot.instanceID(of: long[1]))
            #expect(try snapshot.token(of: instance) == long[1])
            let held = try snapshot.topics(of: instance).map { try snapshot.topicName(of: $0) }
            #expect(Set(held) == [Self.longTopic, shortTopic])
            #expect(try snapshot.subscriberCount(of: #require(try snapshot.topicID(of: Self.longTopic))) == 6)
        }
        #expect(try ledger.verify().isSound)
        try ledger.rebuildProjections()
        #expect(try ledger.verify(checkAudiences: true).isSound)
    }

    @Test("a ledger opened with a 1 MiB map grows through append, rebuild and verify's scratch environment")
    func mapGrowth() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory) { $0.environment.mapSize = 1 << 20 }
        defer { ledger.close() }
        // Wide events (300-byte tokens, 400-byte topics) so that the ledger outgrows the map many times over.
        let tokens = try (0..<2_000).map { try RegistrationToken("device-\($0)-" + String(repeating: "t", count: 290)) }
        let topics = try (0..<20).map { try TopicName("topic-\($0)-" + String(repeating: "n", count: 390)) }
        _ = try await ledger.append(
            WriteRequest(
                actor: "t", requestID: "reg", operations: tokens.map { .register($0, platform: nil, appID: nil) }))
        for (index, topic) in topics.enumerated() {
            let receipt = try await ledger.append(
                WriteRequest(
                    actor: "t", requestID: "sub-\(index)", operations: tokens.map { .subscribe($0, topic, via: .iid) }))
            #expect(receipt.outcomes.allSatisfy { $0.seq != nil })
        }
        // Sends while the map keeps growing: each gets its audience (recorded through the writer).
        for topic in topics.prefix(5) {
            _ = try await ledger.append(
                WriteRequest(
                    actor: "t", requestID: "send-\(topic.rawValue.prefix(8))",
                    operations: [.send(.topic(topic), precedence: .leftToRight, messageJSON: Array("{}".utf8))]))
        }
        ledger.waitForAudiences()
        let statistics = try ledger.readLog { try $0.statistics() }
        #expect(statistics.events == UInt64(tokens.count * (topics.count + 1) + 10))
        #expect(statistics.mapBytes >= 32 << 20, "the map grew from 1 MiB past 32 MiB")
        #expect(statistics.usedBytes > 16 << 20)
        // verify folds into a scratch environment that starts at 1 MiB too.
        let report = try ledger.verify(checkAudiences: true)
        #expect(report.isSound && report.sendsWithoutAudience == 0 && report.audiencesChecked == 5)
        try ledger.rebuildProjections()
        #expect(try ledger.verify().isSound)
    }

    @Test("a layout-2 ledger is upgraded in place to the current layout by its first writer, then takes long names")
    func upgradeFromLayoutTwo() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let token = try RegistrationToken("old-device")
        do {
            let ledger = try openTestLedger(directory)
            _ = try await ledger.append(
                WriteRequest(
                    actor: "t", requestID: "r",
                    operations: [
                        .register(token, platform: nil, appID: nil), .subscribe(token, TopicName("n"), via: .iid),
                    ]))
            ledger.close()
        }
        try makeOlderLayout(2, in: directory)
        let upgraded = try openTestLedger(directory)
        defer { upgraded.close() }
        let receipt = try await upgraded.append(
            WriteRequest(actor: "t", requestID: "long", operations: [.subscribe(token, Self.longTopic, via: .v1)]))
        #expect(receipt.outcomes.first?.seq == 3)
        let version = try upgraded.read { snapshot in
            try snapshot.txn.value(in: try snapshot.txn.openDatabase("meta"), forKey: "layoutVersion")
        }
        #expect(version == withUnsafeBytes(of: LedgerSchema.layoutVersion.bigEndian) { Array($0) })
        #expect(try upgraded.verify().isSound)
    }

    @Test("rebuild grows the map on the thread that writes, holding no read transaction (no deadlock)")
    func rebuildGrowsTheMap() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        do {
            let ledger = try openTestLedger(directory)
            var generator = SeededGenerator(seed: 7)
            _ = try await appendAll(RandomHistory().requests(count: 200, using: &generator), to: ledger)
            ledger.close()
        }
        // Reopen for a rebuild whose write transactions each meet MDB_MAP_FULL once.
        let failed = Counter()
        let injector = LMDBFaultInjector { transaction, call in
            transaction > 1 && call == 3 && failed.increment(upTo: 8) ? .mapFull : nil
        }
        let ledger = try openTestLedger(directory) {
            $0.forRebuild = true
            $0.environment.mapSize = 1 << 20
            $0.environment.faultInjector = injector
        }
        defer { ledger.close() }
        let mapBefore = try ledger.readLog { try $0.statistics().mapBytes }
        let finished = DispatchSemaphore(value: 0)
        let outcome = ResultSlot()
        Thread.detachNewThread {
            outcome.set(Result { try ledger.rebuildProjections() })
            finished.signal()
        }
        #expect(finished.wait(timeout: .now() + 60) == .success, "rebuild finished (a deadlock would hang here)")
        #expect(try outcome.get() > 0)
        #expect(failed.value > 0)
        #expect(try ledger.readLog { try $0.statistics().mapBytes } > mapBefore)
        #expect(try ledger.verify().isSound)
    }

    /// The fault-injection property: the k-th LMDB call of chosen write transactions fails with a chosen
    /// code, over random multi-request workloads committed concurrently (so that requests share batches).
    /// Afterwards the log holds exactly the acknowledged requests' events, the head is its end, and the
    /// projections equal a rebuild.
    @Test(
        "fault injection: for every k, the ledger equals the fold of exactly the acknowledged requests",
        arguments: [LMDBError.Code.mapFull, .badValueSize, .ioError, .noSpace],
        [Ledger.RequestIsolation.retryAlone, .nestedPerRequest])
    func faultInjection(code: LMDBError.Code, isolation: Ledger.RequestIsolation) async throws {
        var failures = 0
        var firings = 0
        for k in 1...45 {
            let directory = TemporaryDirectory()
            defer { directory.remove() }
            // Transaction 1 opens the ledger; after it, every third transaction fails at call k — at most
            // 6 times, as a real map fills a few times and then has room (each MDB_MAP_FULL doubles the map,
            // and the default 1 GiB map reaches its 1 TiB maximum after 10).
            let fired = Counter()
            let injector = LMDBFaultInjector { transaction, call in
                transaction > 1 && transaction % 3 == k % 3 && call == k && fired.increment(upTo: 6) ? code : nil
            }
            failures += try await Self.runFaultyWorkload(
                k: k, code: code, isolation: isolation, directory: directory, injector: injector)
            firings += fired.value
            // Reopened without faults, the ledger takes writes again.
            let reopened = try openTestLedger(directory)
            let receipt = try await reopened.append(
                WriteRequest(
                    actor: "t", requestID: "after",
                    operations: [.register(try RegistrationToken("after-\(k)"), platform: nil, appID: nil)]))
            #expect(receipt.outcomes.first?.seq != nil)
            #expect(try reopened.verify().isSound)
            reopened.close()
        }
        // The injector did fire, and requests failed (and were retried alone), except for a full map, which
        // grows. How many depends on how the concurrent requests were batched (fewer, larger batches on a
        // loaded machine): with retryAlone, 13 requests failed once in CI beside a release build, 26–60 on an
        // idle machine, from 34–89 firings. So failures need only be non-zero; the per-request checks above
        // are the property.
        #expect(firings >= 10, "the injector fired \(firings) times over 45 values of k")
        #expect(code == .mapFull ? failures == 0 : failures > 0, "\(failures) requests failed")
    }

    private static func runFaultyWorkload(
        k: Int, code: LMDBError.Code, isolation: Ledger.RequestIsolation, directory: TemporaryDirectory,
        injector: LMDBFaultInjector
    ) async throws -> Int {
        let ledger = try openTestLedger(directory) {
            $0.environment.faultInjector = injector
            $0.isolation = isolation
        }
        defer { ledger.close() }
        var generator = SeededGenerator(seed: UInt64(k))
        let history = RandomHistory(tokenCount: 6, topicCount: 4)
        let requests = history.requests(count: 40, using: &generator)
        let results = await withTaskGroup(of: (String, Result<WriteReceipt, any Error>).self) { group in
            for request in requests {
                group.addTask { (request.requestID, await Result(appending: request, to: ledger)) }
            }
            var results: [String: Result<WriteReceipt, any Error>] = [:]
            for await (id, result) in group { results[id] = result }
            return results
        }
        ledger.waitForAudiences()
        var eventsByRequest: [String: [UInt64]] = [:]
        try ledger.readLog { snapshot throws in
            try snapshot.forEachEvent(from: 1) { event, _ in
                eventsByRequest[event.requestID, default: []].append(event.seq)
                return true
            }
        }
        for (id, result) in results {
            switch result {
            case .success(let receipt):
                let seqs = receipt.outcomes.compactMap(\.seq)
                #expect(eventsByRequest[id, default: []] == seqs, "k=\(k) \(code): request \(id)")
            case .failure(let error):
                #expect(eventsByRequest[id] == nil, "k=\(k) \(code): failed request \(id) left events")
                #expect((error as? StoreError)?.code == .unavailable)
            }
        }
        if code == .mapFull {
            let errors = results.values.compactMap { result -> String? in
                guard case .failure(let error) = result else { return nil }
                return "\(error)"
            }
            #expect(errors.isEmpty, "a full map only grows: \(errors)")
        }
        let report = try ledger.verify()
        #expect(report.isSound, "k=\(k) \(code): \(report.problems)")
        return results.values.filter { (try? $0.get()) == nil }.count
    }
}

/// A thread-safe counter for injectors.
private final class Counter: @unchecked Sendable {
    // @unchecked: every access holds `lock`.
    private let lock = NSLock()
    private var count = 0

    /// Counts one more and says yes while fewer than `limit` were counted.
    func increment(upTo limit: Int) -> Bool {
        lock.withLock {
            guard count < limit else { return false }
            count += 1
            return true
        }
    }

    var value: Int { lock.withLock { count } }
}

/// Carries a result from a thread to the test.
private final class ResultSlot: @unchecked Sendable {
    // @unchecked: set before the semaphore is signalled, read after it is waited on.
    private var result: Result<UInt64, any Error>?
    func set(_ result: Result<UInt64, any Error>) { self.result = result }
    func get() throws -> UInt64 {
        guard let result else { throw StoreError(.unavailable, "no result") }
        return try result.get()
    }
}

extension Result where Success == WriteReceipt, Failure == any Error {
    init(appending request: WriteRequest, to ledger: Ledger) async {
        do {
            self = .success(try await ledger.append(request))
        } catch {
            self = .failure(error)
        }
    }
}
