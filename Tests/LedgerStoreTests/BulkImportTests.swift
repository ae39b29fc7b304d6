import Foundation
import LMDBKit
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PropertyBased
import Testing
import LedgerQueries

@Suite("Bulk import", .offThePool)
struct BulkImportTests {
    /// Every event gets this time, so that two ledgers built apart can be compared byte for byte.
    static let fixedTime = LedgerTime(microseconds: 1_700_000_000_000_000)

    @Test(
        "a random history imported in bulk gives the outcomes, log, head, projections and Merkle tree of the same requests appended by the live writer, byte for byte; both go on alike"
    )
    func bulkEqualsIncremental() async throws {
        await propertyCheck(count: 20, input: Gen.uint64()) { seed in
            do {
                try await checkBulkEqualsIncremental(seed: seed)
            } catch {
                Issue.record("seed \(seed): \(error)")
            }
        }
    }

    private func checkBulkEqualsIncremental(seed: UInt64) async throws {
        // Few tokens and topics and a low topic limit: re-registrations, repeated subscriptions and the limit
        // all occur inside one request.
        let history = RandomHistory(tokenCount: 6, topicCount: 4)
        var generator = SeededGenerator(seed: seed)
        let requests = randomRequests(history, count: 500, using: &generator)
        let later = randomRequests(history, count: 60, using: &generator)

        let incremental = TemporaryDirectory()
        let bulk = TemporaryDirectory()
        defer {
            incremental.remove()
            bulk.remove()
        }
        let expected: [OperationOutcome]
        let incrementalDirectory: String
        do {
            let ledger = try openFixedLedger(incremental)
            incrementalDirectory = ledger.directory
            expected = try await appendAll(requests, to: ledger).flatMap(\.outcomes)
            ledger.close()
        }
        let bulkDirectory: String
        do {
            let ledger = try openFixedLedger(bulk)
            bulkDirectory = ledger.directory
            let importer = try ledger.beginBulkImport()
            let outcomes = try requests.flatMap { try importer.append($0).outcomes }
            #expect(outcomes == expected, "seed \(seed)")
            #expect(try importer.finish() == (try ledger.readLog { try $0.head().seq }))
            let report = try ledger.verify()
            #expect(report.isSound, "seed \(seed): \(report.problems)")
            ledger.close()
        }
        #expect(expected.contains { $0.rejection?.code == .tooManyTopics }, "seed \(seed)")
        let databases = ["log", "meta"] + projectionDatabases
        #expect(
            try rawDump(directory: bulkDirectory, databases: databases)
                == (try rawDump(directory: incrementalDirectory, databases: databases)), "seed \(seed)")

        // The imported ledger is an ordinary one: the live writer appends to both alike.
        for directory in [incremental, bulk] {
            let ledger = try openFixedLedger(directory)
            _ = try await appendAll(later, to: ledger)
            ledger.close()
        }
        #expect(
            try rawDump(directory: bulkDirectory, databases: databases)
                == (try rawDump(directory: incrementalDirectory, databases: databases)), "seed \(seed)")
    }

    @Test(
        "a bulk import needs an empty ledger, refuses sends and out-of-order times without changing anything, and hides the projections until it finishes"
    )
    func guards() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let token = try RegistrationToken("tok-guard:APA91b1")
        let ledger = try openFixedLedger(directory)
        defer { ledger.close() }
        let importer = try ledger.beginBulkImport()
        #expect {
            _ = try ledger.read { try $0.statistics() }
        } throws: { ($0 as? StoreError)?.code == .rebuildRequired }
        // A second import while the first is open finds the marker.
        #expect {
            _ = try ledger.beginBulkImport()
        } throws: { ($0 as? StoreError)?.code == .rebuildRequired }

        let registered = try importer.append(
            WriteRequest(
                actor: "test", requestID: "r1", time: LedgerTime(microseconds: 2_000),
                operations: [.register(token, platform: "ios", appID: nil)]))
        #expect(registered.outcomes == [.appended(seq: 1)])
        #expect {
            _ = try importer.append(
                WriteRequest(
                    actor: "test", requestID: "r2",
                    operations: [
                        .subscribe(token, try TopicName("news"), via: .iid),
                        .send(.topic(try TopicName("news")), precedence: .leftToRight, messageJSON: Array("{}".utf8)),
                    ]))
        } throws: { ($0 as? StoreError)?.code == .invalidArgument && "\($0)".contains("no sends") }
        #expect {
            _ = try importer.append(
                WriteRequest(
                    actor: "test", requestID: "r3", time: LedgerTime(microseconds: 1_000),
                    operations: [.subscribe(token, try TopicName("news"), via: .iid)]))
        } throws: { ($0 as? StoreError)?.code == .invalidArgument && "\($0)".contains("precedes") }
        // Neither refused request left a trace; the import goes on.
        let subscribed = try importer.append(
            WriteRequest(
                actor: "test", requestID: "r4", operations: [.subscribe(token, try TopicName("news"), via: .iid)]))
        #expect(subscribed.outcomes == [.appended(seq: 2)])
        #expect(try importer.finish() == 2)
        #expect {
            _ = try importer.append(WriteRequest(actor: "test", requestID: "r5", operations: []))
        } throws: { ($0 as? StoreError)?.code == .invalidArgument && "\($0)".contains("finished") }

        let statistics = try ledger.read { try $0.statistics() }
        #expect(statistics.events == 2 && statistics.registeredInstances == 1 && statistics.subscriptions == 1)
        let members = try ledger.read { snapshot in
            try snapshot.topicID(of: try TopicName("news")).map { try snapshot.members(of: $0, at: nil) }
        }
        #expect(members?.count == 1)
        // Not empty any more.
        #expect {
            _ = try ledger.beginBulkImport()
        } throws: { ($0 as? StoreError)?.code == .invalidArgument && "\($0)".contains("empty ledger") }
        #expect(try ledger.read { try $0.statistics() }.events == 2)
    }

    @Test(
        "a bulk import that stops before finishing (the process killed) keeps its committed requests in the log; writers are refused until `rebuild`, which gives the live writer's projections; discard() empties the ledger to what a fresh one holds"
    )
    func interrupted() async throws {
        let history = RandomHistory(tokenCount: 8, topicCount: 5)
        var generator = SeededGenerator(seed: 14)
        let requests = randomRequests(history, count: 300, using: &generator)
        let committed = Array(requests.prefix(200))

        let reference = TemporaryDirectory()
        let killed = TemporaryDirectory()
        let discarded = TemporaryDirectory()
        let fresh = TemporaryDirectory()
        defer {
            reference.remove()
            killed.remove()
            discarded.remove()
            fresh.remove()
        }
        let referenceDirectory: String
        do {
            let ledger = try openFixedLedger(reference)
            referenceDirectory = ledger.directory
            _ = try await appendAll(committed, to: ledger)
            ledger.close()
        }
        let killedDirectory: String
        do {
            let ledger = try openFixedLedger(killed)
            killedDirectory = ledger.directory
            let importer = try ledger.beginBulkImport()
            for request in committed { _ = try importer.append(request) }
            // The requests the log holds when the process is killed: neither finished nor discarded.
            try importer.waitForLog()
            ledger.close()
        }
        #expect {
            _ = try openFixedLedger(killed)
        } throws: { ($0 as? StoreError)?.code == .rebuildRequired && "\($0)".contains("ledger rebuild") }
        do {
            let ledger = try openFixedLedger(killed) { $0.forRebuild = true }
            #expect(try ledger.rebuildProjections() == UInt64(try ledger.readLog { try $0.head().seq }))
            ledger.close()
        }
        let databases = ["log", "meta"] + projectionDatabases
        #expect(
            try rawDump(directory: killedDirectory, databases: databases)
                == (try rawDump(directory: referenceDirectory, databases: databases)))

        let discardedDirectory: String
        do {
            let ledger = try openFixedLedger(discarded)
            discardedDirectory = ledger.directory
            let importer = try ledger.beginBulkImport()
            for request in committed { _ = try importer.append(request) }
            try importer.discard()
            #expect {
                try importer.finish()
            } throws: { ($0 as? StoreError)?.code == .invalidArgument }
            #expect(try ledger.read { try $0.statistics() }.events == 0)
            ledger.close()
        }
        let freshDirectory: String
        do {
            let ledger = try openFixedLedger(fresh)
            freshDirectory = ledger.directory
            ledger.close()
        }
        #expect(
            try rawDump(directory: discardedDirectory, databases: databases)
                == (try rawDump(directory: freshDirectory, databases: databases)))
        // Empty again: a new bulk import goes in whole.
        do {
            let ledger = try openFixedLedger(discarded)
            let importer = try ledger.beginBulkImport()
            for request in committed { _ = try importer.append(request) }
            try importer.finish()
            ledger.close()
        }
        #expect(
            try rawDump(directory: discardedDirectory, databases: databases)
                == (try rawDump(directory: referenceDirectory, databases: databases)))
    }

    @Test(
        "a bulk import from a 64 KiB map grows it for the log and for the projections; with the map capped it fails with whole requests in the log, until discard() empties it"
    )
    func mapGrowthAndFullMap() async throws {
        // Long tokens (about 160 bytes, as FCM's) make a ledger of some megabytes quickly.
        let tokens = (0..<3_000).map { try! RegistrationToken("tok-\($0):APA91b" + String(repeating: "x", count: 150)) }
        let topics = (0..<20).map { try! TopicName("topic-\($0)") }
        var requests: [WriteRequest] = []
        for start in stride(from: 0, to: tokens.count, by: 500) {
            var operations: [LedgerOperation] = []
            for token in tokens[start..<start + 500] {
                operations.append(.register(token, platform: "android", appID: nil))
                for offset in 0..<3 { operations.append(.subscribe(token, topics[(start + offset) % 20], via: .iid)) }
            }
            requests.append(WriteRequest(actor: "test", requestID: "r\(start)", operations: operations))
        }

        let reference = TemporaryDirectory()
        let grown = TemporaryDirectory()
        let capped = TemporaryDirectory()
        defer {
            reference.remove()
            grown.remove()
            capped.remove()
        }
        let tiny = { (options: inout Ledger.Options) in options.environment.mapSize = 1 << 16 }
        let referenceDirectory: String
        do {
            let ledger = try openFixedLedger(reference, tiny)
            referenceDirectory = ledger.directory
            _ = try await appendAll(requests, to: ledger)
            ledger.close()
        }
        let grownDirectory: String
        do {
            let ledger = try openFixedLedger(grown, tiny)
            grownDirectory = ledger.directory
            let importer = try ledger.beginBulkImport()
            for request in requests { _ = try importer.append(request) }
            try importer.finish()
            #expect(try ledger.read { try $0.statistics() }.mapBytes > 1 << 16)
            ledger.close()
        }
        let databases = ["log", "meta"] + projectionDatabases
        #expect(
            try rawDump(directory: grownDirectory, databases: databases)
                == (try rawDump(directory: referenceDirectory, databases: databases)))

        // Capped at 1 MiB: the log of the first request fits, not all of them.
        let cap = { (options: inout Ledger.Options) in
            options.environment.mapSize = 1 << 16
            options.environment.maximumMapSize = 1 << 20
        }
        do {
            let ledger = try openFixedLedger(capped, cap)
            let importer = try ledger.beginBulkImport()
            var failure: (any Error)?
            for request in requests {
                do {
                    _ = try importer.append(request)
                } catch {
                    failure = error
                    break
                }
            }
            // The log is written behind the appends: a failure shows at a later append, or once waited for.
            if failure == nil {
                do { try importer.waitForLog() } catch { failure = error }
            }
            #expect((failure as? StoreError)?.code == .unavailable && "\(failure!)".contains("disk is full"))
            let head = try ledger.readLog { try $0.head() }
            // Each request appends 1,500 events (a registration and two subscriptions per token: the third is
            // over the limit of 2).
            #expect(head.seq > 0 && head.seq < 9_000)
            #expect(head.seq % 1_500 == 0, "whole requests only: \(head.seq)")
            #expect {
                try importer.finish()
            } throws: { ($0 as? StoreError)?.code == .invalidArgument }
            try importer.discard()
            ledger.close()
        }
        let ledger = try openFixedLedger(capped, cap)
        #expect(try ledger.read { try $0.statistics() }.events == 0)
        #expect(try ledger.verify().isSound)
        ledger.close()
    }

    // MARK: Helpers

    /// A ledger whose clock always says ``fixedTime``.
    private func openFixedLedger(
        _ directory: TemporaryDirectory, _ configure: (inout Ledger.Options) -> Void = { _ in }
    ) throws -> Ledger {
        try openTestLedger(directory) { options in
            options.clock = { BulkImportTests.fixedTime }
            options.limits.maximumTopicsPerInstance = 2
            // The same seal keys in the same order for the live writer and the import (the log is compared).
            options.limits.sealKeys = SealKeySource(seed: 65)
            configure(&options)
        }
    }

    /// `count` operations of `history` without sends (a bulk import takes none), in requests of 1…120.
    private func randomRequests(_ history: RandomHistory, count: Int, using generator: inout SeededGenerator)
        -> [WriteRequest]
    {
        var operations = (0..<count).map { _ in history.operation(using: &generator) }.filter {
            if case .send = $0 { false } else { true }
        }
        var requests: [WriteRequest] = []
        while !operations.isEmpty {
            let size = min(Int.random(in: 1...120, using: &generator), operations.count)
            requests.append(
                WriteRequest(
                    actor: "test", requestID: "req-\(requests.count)", operations: Array(operations.prefix(size))))
            operations.removeFirst(size)
        }
        return requests
    }
}
