import Foundation
import LMDBKit
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PropertyBased
import Testing
import LedgerQueries

@Suite("Ledger properties", .offThePool)
struct LedgerPropertyTests {
    @Test("a random history applied incrementally equals the fold of its log, and equals a rebuild byte for byte")
    func incrementalEqualsRebuild() async throws {
        await propertyCheck(count: 25, input: Gen.uint64()) { seed in
            do {
                try await checkIncrementalEqualsRebuild(seed: seed)
            } catch {
                Issue.record("seed \(seed): \(error)")
            }
        }
    }

    @Test(
        "the appender decides alike whatever the batching: a history appended as large requests gives the outcomes and events of the same operations appended one per transaction"
    )
    func batchingDoesNotChangeDecisions() async throws {
        await propertyCheck(count: 10, input: Gen.uint64()) { seed in
            do {
                // Few tokens and topics and a low topic limit, so one request meets the same token and topic
                // again and again, across registrations, and reaches the limit (the writer remembers lookups
                // for a transaction: MemoizedProjection).
                let history = RandomHistory(tokenCount: 5, topicCount: 4)
                var generator = SeededGenerator(seed: seed)
                let operations = (0..<400).map { _ in history.operation(using: &generator) }.filter {
                    if case .send = $0 { false } else { true }
                }
                let one = try await outcomesAndEvents(of: operations.map { [$0] })
                let large = try await outcomesAndEvents(
                    of: stride(from: 0, to: operations.count, by: 97).map {
                        Array(operations[$0..<min($0 + 97, operations.count)])
                    })
                let outcome = firstDifference(one.outcomes, large.outcomes)
                #expect(outcome == nil, "seed \(seed): outcome \(outcome ?? -1) differs")
                let event = firstDifference(one.events, large.events)
                #expect(event == nil, "seed \(seed): event \(event ?? -1) differs")
                #expect(one.outcomes.contains { $0.rejection?.code == .tooManyTopics }, "seed \(seed)")
            } catch {
                Issue.record("seed \(seed): \(error)")
            }
        }
    }

    /// The first index where the two differ (a shorter one differs where it ends), or `nil`.
    private func firstDifference<T: Equatable>(_ a: [T], _ b: [T]) -> Int? {
        a.indices.first { $0 < b.count && a[$0] != b[$0] } ?? (a.count == b.count ? nil : min(a.count, b.count))
    }

    /// Appends `requests` in turn to a fresh ledger allowing 2 topics an instance: every outcome, and every
    /// event's body.
    private func outcomesAndEvents(of requests: [[LedgerOperation]]) async throws
        -> (outcomes: [OperationOutcome], events: [LedgerEvent.Body])
    {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory) { $0.limits.maximumTopicsPerInstance = 2 }
        defer { ledger.close() }
        var outcomes: [OperationOutcome] = []
        for (index, operations) in requests.enumerated() {
            let receipt = try await ledger.append(
                WriteRequest(actor: "test", requestID: "r\(index)", operations: operations))
            // Seqs differ with the batching only through the outcomes before them; compare kinds.
            outcomes += receipt.outcomes.map { $0.seq == nil ? $0 : .appended(seq: 0) }
        }
        var events: [LedgerEvent.Body] = []
        try ledger.readLog { snapshot throws in
            try snapshot.forEachEvent(from: 1, through: try snapshot.head().seq) { event, _ in
                events.append(event.body)
                return true
            }
        }
        return (outcomes, events)
    }

    private func checkIncrementalEqualsRebuild(seed: UInt64) async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let history = RandomHistory()
        var generator = SeededGenerator(seed: seed)
        let ledgerDirectory: String
        do {
            let ledger = try openTestLedger(directory)
            ledgerDirectory = ledger.directory
            _ = try await appendAll(history.requests(count: 60, using: &generator), to: ledger)
            let folded = try foldLog(ledger).last!
            let observed = try ledger.read {
                try ObservedState($0, at: nil, tokens: history.tokens, topics: history.topics)
            }
            #expect(observed == ObservedState(folded, tokens: history.tokens, topics: history.topics))
            let report = try ledger.verify()
            #expect(report.isSound, "\(report.problems)")
            ledger.close()
        }
        let before = try rawDump(directory: ledgerDirectory, databases: projectionDatabases)
        do {
            let ledger = try openTestLedger(directory)
            try ledger.rebuildProjections()
            ledger.close()
        }
        let after = try rawDump(directory: ledgerDirectory, databases: projectionDatabases)
        #expect(before == after)
        #expect(!(before["instances"] ?? []).isEmpty)
    }

    @Test(
        "a log of several fold batches rebuilds every projection, the Merkle tree included, byte for byte; an event missing from a later batch fails the rebuild without hanging its threads",
        .timeLimit(.minutes(2)))
    func rebuildAcrossBatches() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let history = RandomHistory(tokenCount: 400, topicCount: 30)
        var generator = SeededGenerator(seed: 16)
        let ledgerDirectory: String
        let head: UInt64
        do {
            let ledger = try openTestLedger(directory)
            ledgerDirectory = ledger.directory
            var request = 0
            // Three full batches of the fold's reader (4096 events each) and a partial one.
            while try ledger.readLog({ try $0.head().seq }) < 14_000 {
                request += 1
                let operations = (0..<1000).map { _ in history.operation(using: &generator) }
                _ = try await ledger.append(
                    WriteRequest(actor: "test", requestID: "bulk-\(request)", operations: operations))
            }
            ledger.close()  // after the audiences of the sends are recorded
            head = try openTestLedger(directory, mode: .readOnly).readLog { try $0.head().seq }
        }
        let before = try rawDump(directory: ledgerDirectory, databases: projectionDatabases)
        #expect((before["merkle"] ?? []).count >= Int(head) / 256)  // one per complete subtree of 256+ leaves
        do {
            let ledger = try openTestLedger(directory)
            let rebuilt = try ledger.rebuildProjections()
            #expect(rebuilt == head, "rebuilt \(rebuilt) of \(head)")
            ledger.close()
        }
        #expect(try rawDump(directory: ledgerDirectory, databases: projectionDatabases) == before)

        // An event missing in the fourth batch: the folding thread stops there, the reader and the tree's
        // thread are told to stop, and the rebuild reports the gap (and is left to be run again).
        let missing: UInt64 = 3 * 4096 + 100
        try withRawLog(directory: ledgerDirectory) { txn, log throws in _ = try txn.delete(log, key: missing) }
        let ledger = try openTestLedger(directory)
        #expect {
            try ledger.rebuildProjections()
        } throws: { error in
            (error as? StoreError)?.code == .corrupt && "\(error)".contains("no event at seq \(missing)")
        }
        #expect(!(try ledger.verify().isSound))
    }

    @Test("state at every seq of a random history equals folding the log up to that seq")
    func pointInTime() async throws {
        await propertyCheck(count: 15, input: Gen.uint64()) { seed in
            do {
                let directory = TemporaryDirectory()
                defer { directory.remove() }
                let history = RandomHistory(tokenCount: 6, topicCount: 4)
                var generator = SeededGenerator(seed: seed)
                let ledger = try openTestLedger(directory)
                _ = try await appendAll(history.requests(count: 40, using: &generator), to: ledger)
                let states = try foldLog(ledger)
                try ledger.read { snapshot throws in
                    for (seq, state) in states.enumerated() {
                        let observed = try ObservedState(
                            snapshot, at: UInt64(seq), tokens: history.tokens, topics: history.topics)
                        let expected = ObservedState(state, tokens: history.tokens, topics: history.topics)
                        #expect(observed == expected, "seed \(seed) seq \(seq)")
                        if observed != expected { return }
                    }
                }
            } catch {
                Issue.record("seed \(seed): \(error)")
            }
        }
    }

    @Test("flipping any single byte of a stored event makes verify fail and name that seq")
    func verifyDetectsFlippedByte() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let history = RandomHistory()
        var generator = SeededGenerator(seed: 42)
        let ledgerDirectory: String
        let eventCount: UInt64
        do {
            let ledger = try openTestLedger(directory)
            ledgerDirectory = ledger.directory
            _ = try await appendAll(history.requests(count: 30, using: &generator), to: ledger)
            eventCount = try ledger.readLog { try $0.head().seq }
            ledger.close()
        }
        #expect(eventCount > 20)
        await propertyCheck(count: 60, input: Gen.uint64()) { choice in
            var random = SeededGenerator(seed: choice)
            let seq = UInt64.random(in: 1...eventCount, using: &random)
            do {
                let (offset, bit) = try withRawLog(directory: ledgerDirectory) { txn, log throws in
                    var record = try txn.value(in: log, forKey: seq)!
                    let offset = Int.random(in: 0..<record.count, using: &random)
                    let bit = UInt8(1) << UInt8.random(in: 0..<8, using: &random)
                    record[offset] ^= bit
                    try txn.put(log, key: seq, value: record)
                    return (offset, bit)
                }
                let ledger = try openTestLedger(directory, mode: .readOnly)
                let report = try ledger.verify()
                #expect(!report.isSound, "flipped byte \(offset) of seq \(seq) went unnoticed")
                #expect(
                    report.problems.first?.hasPrefix("seq \(seq):") == true,
                    "byte \(offset) of seq \(seq): \(report.problems)")
                // Restore the byte so the next case starts from a sound ledger.
                try withRawLog(directory: ledgerDirectory) { txn, log throws in
                    var record = try txn.value(in: log, forKey: seq)!
                    record[offset] ^= bit
                    try txn.put(log, key: seq, value: record)
                }
            } catch {
                Issue.record("seq \(seq): \(error)")
            }
        }
        let ledger = try openTestLedger(directory, mode: .readOnly)
        #expect(try ledger.verify().isSound)
    }
}
