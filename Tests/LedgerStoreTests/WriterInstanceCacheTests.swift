import Foundation
import LMDBKit
import LedgerCore
@testable import LedgerStore
import LedgerTestSupport
import Testing
import LedgerQueries

/// The writer keeps registrations and topic counts from one transaction to the next (`WriterInstanceCache`); a
/// transaction that does not commit must leave none of what it learnt or changed behind.
@Suite("Instance facts", .offThePool)
struct WriterInstanceCacheTests {
    static let token = try! RegistrationToken("device")
    static func topic(_ name: String) -> TopicName { try! TopicName(name) }

    @Test("kept from a commit to the next transaction only; forgotten after any other")
    func transactions() {
        let facts = WriterInstanceCache()
        facts.begin(transaction: 5)
        facts.setTopicCount(3, of: 7)
        facts.setRegistered(true, 7)
        facts.committed(transaction: 5)
        facts.begin(transaction: 6)
        #expect(facts.topicCount(of: 7) == 3 && facts.isRegistered(7) == true)
        facts.setTopicCount(4, of: 7)
        // Transaction 6 never committed: run again (a grown map) or the next one, it starts from nothing.
        facts.begin(transaction: 6)
        #expect(facts.topicCount(of: 7) == nil && facts.isRegistered(7) == nil)
        facts.setTopicCount(1, of: 7)
        facts.committed(transaction: 6)
        // Another writer's transaction 7 came between: forgotten.
        facts.begin(transaction: 8)
        #expect(facts.topicCount(of: 7) == nil)
        // Ids not kept, counts past the largest kept: unknown, never a trap or a huge array.
        facts.setTopicCount(70_000, of: 9)
        facts.setTopicCount(-1, of: 10)
        facts.setRegistered(true, 0)
        facts.setRegistered(true, .max)
        #expect(facts.topicCount(of: 9) == nil && facts.topicCount(of: 10) == nil)
        #expect(facts.isRegistered(0) == nil && facts.isRegistered(.max) == nil)
        facts.setTopicCount(2, of: 100_000)
        #expect(facts.topicCount(of: 100_000) == 2 && facts.topicCount(of: 99_999) == nil)
    }

    /// Opens a ledger whose instances may hold two topics, with `device` registered and subscribed to `a`;
    /// the first write transaction after that (a nested request's parent or child) to reach its LMDB call `k`
    /// meets `code` there, once.
    static func ledger(
        _ directory: TemporaryDirectory, failing code: LMDBError.Code, atCall k: Int,
        isolation: Ledger.RequestIsolation
    ) async throws -> Ledger {
        let fault = OneFault()
        let ledger = try openTestLedger(directory) {
            $0.limits.maximumTopicsPerInstance = 2
            $0.isolation = isolation
            $0.environment.faultInjector = LMDBFaultInjector { _, call in call == k && fault.fire() ? code : nil }
        }
        let setup = try await ledger.append(
            WriteRequest(
                actor: "t", requestID: "setup",
                operations: [.register(token, platform: nil, appID: nil), .subscribe(token, topic("a"), via: .v1)]))
        #expect(setup.outcomes.allSatisfy { $0.seq != nil })
        fault.arm()
        return ledger
    }

    @Test(
        "a subscription whose transaction failed or ran again counts once, or not at all",
        arguments: [LMDBError.Code.mapFull, .ioError], [Ledger.RequestIsolation.retryAlone, .nestedPerRequest])
    func failedSubscription(code: LMDBError.Code, isolation: Ledger.RequestIsolation) async throws {
        var failures = 0
        for k in 1...30 {
            let directory = TemporaryDirectory()
            defer { directory.remove() }
            let ledger = try await Self.ledger(directory, failing: code, atCall: k, isolation: isolation)
            defer { ledger.close() }
            // Transaction 3: `b`, the second topic. A full map is grown and the transaction run again, which
            // must not find `b` counted by the first run; any other failure leaves the count at one.
            let second = await Result(
                appending: WriteRequest(
                    actor: "t", requestID: "b", operations: [.subscribe(Self.token, Self.topic("b"), via: .v1)]),
                to: ledger)
            let held: Int
            switch second {
            case .success(let receipt):
                #expect(receipt.outcomes.count == 1 && receipt.outcomes[0].seq != nil, "k=\(k): \(receipt.outcomes)")
                held = 2
            case .failure:
                #expect(code != .mapFull, "k=\(k): a full map only grows")
                failures += 1
                held = 1
            }
            // A third topic fits exactly when the second failed; a fourth never does.
            let third = try await ledger.append(
                WriteRequest(
                    actor: "t", requestID: "c", operations: [.subscribe(Self.token, Self.topic("c"), via: .v1)]))
            #expect((third.outcomes[0].seq != nil) == (held == 1), "k=\(k): \(third.outcomes)")
            let fourth = try await ledger.append(
                WriteRequest(
                    actor: "t", requestID: "d", operations: [.subscribe(Self.token, Self.topic("d"), via: .v1)]))
            #expect(fourth.outcomes[0].rejection?.code == .tooManyTopics, "k=\(k): \(fourth.outcomes)")
            #expect(try ledger.read { try $0.subscriptions(of: 1).count } == 2)
            #expect(try ledger.verify().isSound)
        }
        #expect(code == .mapFull ? failures == 0 : failures > 0)
    }

    /// A failed request in a batch with one that commits: the batch's transaction commits, and must not
    /// carry what the failed request's (nested) transaction learnt. Driven through the writer's batch
    /// functions, which is where requests share a transaction (the ledger's queue decides that by timing).
    @Test(
        "a request that failed beside one that committed leaves no count behind",
        arguments: [Ledger.RequestIsolation.retryAlone, .nestedPerRequest])
    func failedBesideCommitted(isolation: Ledger.RequestIsolation) throws {
        var failures = 0
        for k in 1...40 {
            let directory = TemporaryDirectory()
            defer { directory.remove() }
            let fault = OneFault()
            var options = Ledger.Options()
            options.limits.maximumTopicsPerInstance = 2
            options.environment.faultInjector = LMDBFaultInjector { _, call in
                call == k && fault.fire() ? .ioError : nil
            }
            let storage = try LedgerStorage.open(dataDirectory: directory.path, project: .default, options: options)
            let facts = WriterInstanceCache()
            let moves = RecentMemberships.MoveCursor()
            let chainWorker = SerialWorker<BlockingJob, Void>(name: "test-chain")
            func commit(_ operations: [[LedgerOperation]]) -> [Result<WriteReceipt, any Error>] {
                let batch = operations.enumerated().map {
                    WriteRequest(actor: "t", requestID: "r\($0.offset)", operations: $0.element)
                }
                let now = LedgerTime(microseconds: 1_800_000_000_000_000)
                return BatchCommit(
                    environment: storage.environment, schema: storage.schema, limits: options.limits, moves: moves,
                    facts: facts, chainWorker: chainWorker, isolation: isolation, logger: quietLogger
                ).run(batch, now: now).results
            }
            let other = try RegistrationToken("other")
            _ = try commit([
                [.register(Self.token, platform: nil, appID: nil), .subscribe(Self.token, Self.topic("a"), via: .v1)]
            ])[0].get()
            fault.arm()
            let batch = commit([
                [.subscribe(Self.token, Self.topic("b"), via: .v1)], [.register(other, platform: nil, appID: nil)],
            ])
            let held = (try? batch[0].get()) == nil ? 1 : 2
            if held == 1 { failures += 1 }
            let third = try commit([[.subscribe(Self.token, Self.topic("c"), via: .v1)]])[0].get()
            #expect((third.outcomes[0].seq != nil) == (held == 1), "k=\(k): \(third.outcomes)")
            let fourth = try commit([[.subscribe(Self.token, Self.topic("d"), via: .v1)]])[0].get()
            #expect(fourth.outcomes[0].rejection?.code == .tooManyTopics, "k=\(k): \(fourth.outcomes)")
        }
        // Retried alone, the request commits the second time (the fault fires once); nested, it fails alone.
        #expect(isolation == .retryAlone ? failures == 0 : failures > 0, "\(failures) failed")
    }

    @Test(
        "an unregistration whose transaction failed leaves the token registered",
        arguments: [Ledger.RequestIsolation.retryAlone, .nestedPerRequest])
    func failedUnregistration(isolation: Ledger.RequestIsolation) async throws {
        var failures = 0
        for k in 1...30 {
            let directory = TemporaryDirectory()
            defer { directory.remove() }
            let ledger = try await Self.ledger(directory, failing: .ioError, atCall: k, isolation: isolation)
            defer { ledger.close() }
            let gone = await Result(
                appending: WriteRequest(
                    actor: "t", requestID: "gone", operations: [.unregister(Self.token, reason: "test")]),
                to: ledger)
            let registered = (try? gone.get()) == nil
            if registered { failures += 1 }
            let subscribe = try await ledger.append(
                WriteRequest(
                    actor: "t", requestID: "b", operations: [.subscribe(Self.token, Self.topic("b"), via: .v1)]))
            #expect((subscribe.outcomes[0].seq != nil) == registered, "k=\(k): \(subscribe.outcomes)")
            #expect(try ledger.verify().isSound)
        }
        #expect(failures > 0)
    }
}

/// A fault that fires once, after it is armed.
private final class OneFault: @unchecked Sendable {
    // @unchecked: every access holds `lock`.
    private let lock = NSLock()
    private var armed = false
    private var fired = false

    func arm() { lock.withLock { armed = true } }

    /// Whether to fail this call: the first time it is asked once armed.
    func fire() -> Bool {
        lock.withLock {
            guard armed, !fired else { return false }
            fired = true
            return true
        }
    }

    @Test(
        "waiting counts are kept for every instance once loaded, ids past the arrays' limit too, follow adds, deletes and moves, and are forgotten with the rest"
    )
    func recentCountsOfEveryInstance() {
        let facts = WriterInstanceCache()
        let large = WriterInstanceCache.largestKeptInstance + 5
        #expect(facts.recentCount(of: 3) == nil, "not loaded")
        facts.recentChanged(3, by: 1)
        #expect(facts.recentCount(of: 3) == nil, "a change before loading is not a count")
        facts.loadRecentCounts([3: 2, large: 4])
        #expect(facts.recentCount(of: 3) == 2)
        #expect(facts.recentCount(of: large) == 4)
        #expect(facts.recentCount(of: 7) == 0)
        facts.recentChanged(large, by: 1)
        facts.recentChanged(7, by: 1)
        facts.recentChanged(3, by: -1)
        #expect(facts.recentCount(of: large) == 5)
        #expect(facts.recentCount(of: 7) == 1)
        #expect(facts.recentCount(of: 3) == 1)
        facts.recentMoved(large)
        #expect(facts.recentCount(of: large) == 0)
        #expect(facts.recentCount(of: 3) == 1)
        // A delete of what the counts say is not there: they are wrong, and forgotten.
        facts.recentChanged(9, by: -1)
        #expect(facts.recentCount(of: 3) == nil)
        facts.loadRecentCounts([3: 1])
        facts.forget()
        #expect(facts.recentCount(of: 3) == nil)
    }
}
