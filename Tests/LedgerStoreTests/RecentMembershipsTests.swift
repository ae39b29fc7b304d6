import Foundation
import LMDBKit
import LedgerCore
@testable import LedgerStore
import LedgerTestSupport
import Testing
import LedgerQueries

/// The instance side of new memberships waits in `recentMemberships` and moves to `instanceTopics` a
/// partition at a time (`RecentMemberships`): wherever an entry sits, every read answers alike.
@Suite("Recent memberships: the instance side's two databases", .offThePool)
struct RecentMembershipsTests {
    /// The entries of each of the instance side's databases.
    private func sideCounts(_ directory: String) throws -> (moved: Int, recent: Int) {
        let environment = try LMDBEnvironment(path: directory)
        return try environment.read { txn throws in
            (
                try txn.count(try txn.openDatabase("instanceTopics")),
                try txn.count(try txn.openDatabase("recentMemberships"))
            )
        }
    }

    @Test(
        "one random history appended with moves at every commit, every 7 entries and never: the same state at every seq, subscriptions, statistics and audits, the same instance side, a sound verify; after each commit fewer than the limit wait — with its instances in one partition, and across two",
        arguments: [0, 4_090]
    )
    func splitChangesNoRead(padding: Int) async throws {
        // `padding` instances registered first, so that the history's own instances get ids from padding + 1: 4,090
        // puts them on both sides of 4,096, where a partition begins (for any partition size up to 4,096).
        let pad = WriteRequest(
            actor: "test", requestID: "pad",
            operations: (0..<padding).map { .register(try! RegistrationToken("pad-\($0)"), platform: nil, appID: nil) })
        for seed: UInt64 in [3, 41, 978] {
            let history = RandomHistory(tokenCount: 12, topicCount: 6)
            var generator = SeededGenerator(seed: seed)
            let requests = history.requests(count: 80, using: &generator)
            var observed: [Int: [ObservedState]] = [:]
            var subscriptions: [Int: [String: [String]]] = [:]
            var dumps: [Int: [String: [[UInt8]]]] = [:]
            var audits: [Int: [String]] = [:]
            for limit in [0, 7, 65_536] {
                let directory = TemporaryDirectory()
                defer { directory.remove() }
                // No audience events: the recorder appends them at times of its own, and seqs are compared here.
                let ledger = try openTestLedger(directory) { options in
                    options.limits.recentMembershipsBeforeMove = limit
                    options.recordsAudiences = false
                }
                let path = ledger.directory
                if padding > 0 { _ = try await ledger.append(pad) }
                let start = try ledger.readLog { try $0.head().seq }
                for request in requests {
                    _ = try await ledger.append(request)
                    // The move runs at the end of the commit that reaches the limit.
                    #expect(try sideCounts(path).recent < max(limit, 1), "seed \(seed), limit \(limit)")
                }
                let head = try ledger.readLog { try $0.head().seq }
                observed[limit] = try (start...head).map { seq in
                    try ledger.read {
                        try ObservedState($0, at: seq, tokens: history.tokens, topics: history.topics)
                    }
                }
                subscriptions[limit] = try ledger.read { snapshot in
                    var byToken: [String: [String]] = [:]
                    for token in history.tokens {
                        guard let instance = try snapshot.instanceID(of: token) else { continue }
                        let held = try snapshot.subscriptions(of: instance)
                        #expect(held.map(\.topic) == held.map(\.topic).sorted(), "ascending by topic id")
                        byToken[token.rawValue] = try held.map {
                            "\(try snapshot.topicName(of: $0.topic)!.rawValue)@\($0.since)"
                        }
                    }
                    return byToken
                }
                audits[limit] = try ledger.read { snapshot in
                    try history.tokens.compactMap { token in
                        try snapshot.instanceAudit(token, at: head).map { audit in
                            "\(audit.subscriptions.map { "\($0.topic.rawValue) \($0.interval)" })"
                        }
                    }
                }
                let statistics = try ledger.read { try $0.statistics() }
                let report = try ledger.verify()
                #expect(report.isSound, "seed \(seed), limit \(limit): \(report.problems)")
                ledger.close()
                let (moved, recent) = try sideCounts(path)
                #expect(statistics.subscriptions == moved + recent)
                switch limit {
                case 0: #expect(recent == 0)
                case 65_536: #expect(moved == 0 && recent > 0, "new memberships wait on the small tree")
                default: #expect(moved > 0 && recent > 0, "seed \(seed): both sides in use")
                }
                dumps[limit] = try rawDump(directory: path, databases: projectionDatabases)
            }
            for limit in [7, 65_536] {
                let first = (observed[0] ?? []).indices.first { observed[limit]?[$0] != observed[0]?[$0] }
                #expect(
                    first == nil && observed[limit]?.count == observed[0]?.count,
                    "seed \(seed), limit \(limit): at seq \(first.map(String.init) ?? "-"): \(first.map { "\(observed[limit]![$0]) vs \(observed[0]![$0])" } ?? "")"
                )
                #expect(subscriptions[limit] == subscriptions[0], "seed \(seed), limit \(limit)")
                #expect(audits[limit] == audits[0], "seed \(seed), limit \(limit)")
                // The instance side; other databases hold random message ids and times.
                for name in ["instanceTopics", "topicMembers", "instanceTopicHistory", "topicMemberHistory"] {
                    #expect(dumps[limit]?[name] == dumps[0]?[name], "seed \(seed), limit \(limit), \(name)")
                }
            }
            #expect(dumps[0]?["instanceTopics"]?.isEmpty == false)
        }
    }

    @Test(
        "verify reports a membership on the instance side that the log does not hold, whichever database it is in; a rebuild moves every membership to instanceTopics"
    )
    func verifyComparesBothDatabases() async throws {
        // Instance 1 holding topic 0x7fff since seq 1, where no event says so: in its partition of
        // recentMemberships, in instanceTopics, and in a partition of recentMemberships it does not belong to.
        let forgeries: [(database: String, key: [UInt8], value: [UInt8])] = [
            ("recentMemberships", [0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0x7f, 0xff]),
            ("instanceTopics", [0, 0, 0, 1], [0, 0, 0x7f, 0xff, 0, 0, 0, 0, 0, 0, 0, 1]),
            ("recentMemberships", [0, 0, 0, 3], [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0x7f, 0xff]),
        ]
        for (database, key, forged) in forgeries {
            let directory = TemporaryDirectory()
            defer { directory.remove() }
            let history = RandomHistory(tokenCount: 6, topicCount: 3)
            var generator = SeededGenerator(seed: 5)
            let path: String
            do {
                let ledger = try openTestLedger(directory) { $0.limits.recentMembershipsBeforeMove = 1_000 }
                path = ledger.directory
                _ = try await appendAll(history.requests(count: 30, using: &generator), to: ledger)
                #expect(try ledger.verify().isSound)
                ledger.close()
            }
            #expect(try sideCounts(path).recent > 0)

            do {
                let environment = try LMDBEnvironment(path: path)
                try environment.write { txn throws in
                    try txn.put(try txn.openDatabase(database), key: key, value: forged)
                }
            }
            do {
                let ledger = try openTestLedger(directory) { $0.limits.recentMembershipsBeforeMove = 1_000 }
                let report = try ledger.verify()
                #expect(
                    report.problems.contains { $0.contains("projection \(database) differs") }, "\(report.problems)")
                _ = try ledger.rebuildProjections()
                #expect(try ledger.verify().isSound)
                ledger.close()
            }
            #expect(try sideCounts(path).recent == 0)
        }
    }

    /// A ledger of 40 random requests, every membership moved to `instanceTopics` at each commit (as layouts
    /// 6 and 7 with nothing waiting would hold it), closed; its directory.
    private func movedLedger(
        _ directory: TemporaryDirectory, _ history: RandomHistory, _ generator: inout SeededGenerator
    )
        async throws -> String
    {
        let ledger = try openTestLedger(directory) { options in
            options.limits.recentMembershipsBeforeMove = 0
            options.recordsAudiences = false
        }
        _ = try await appendAll(history.requests(count: 40, using: &generator), to: ledger)
        ledger.close()
        #expect(try sideCounts(ledger.directory).moved > 0)
        return ledger.directory
    }

    /// Readers refuse the older ledger with the way to upgrade it; its first writer upgrades it in place to the
    /// state the log folds to, sound; returns that writer.
    private func expectUpgraded(_ directory: TemporaryDirectory, _ history: RandomHistory) throws -> Ledger {
        #expect {
            try openTestLedger(directory, mode: .readOnly)
        } throws: { error in
            "\(error)".contains("older store layout") && "\(error)".contains("open it once with a writer")
        }
        let ledger = try openTestLedger(directory) { $0.limits.recentMembershipsBeforeMove = 1_000 }
        let head = try ledger.readLog { try $0.head().seq }
        let folded = try foldLog(ledger)
        for seq in [head / 2, head] {
            let observed = try ledger.read {
                try ObservedState($0, at: seq, tokens: history.tokens, topics: history.topics)
            }
            #expect(observed == ObservedState(folded[Int(seq)], tokens: history.tokens, topics: history.topics))
        }
        #expect(try ledger.verify().isSound)
        return ledger
    }

    /// The layout version stored in a closed ledger's meta database.
    private func layoutVersion(_ path: String) throws -> [UInt8]? {
        try LMDBEnvironment(path: path).read { txn throws in
            try txn.value(in: try txn.openDatabase("meta"), forKey: "layoutVersion")
        }
    }

    @Test(
        "a layout-6 ledger (no recent side) is refused by readers with the way to upgrade it, and upgraded in place by its first writer: same state, sound, and new memberships wait in recentMemberships"
    )
    func upgradeFromLayout6() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let history = RandomHistory(tokenCount: 8, topicCount: 4)
        var generator = SeededGenerator(seed: 61)
        let path = try await movedLedger(directory, history, &generator)
        try LMDBEnvironment(path: path).write { txn throws in
            try txn.drop(try txn.openDatabase("recentMemberships"))
            try txn.put(try txn.openDatabase("meta"), key: "layoutVersion", value: UInt32(6))
        }
        let ledger = try expectUpgraded(directory, history)
        _ = try await appendAll(history.requests(count: 20, using: &generator), to: ledger)
        #expect(try ledger.verify().isSound)
        ledger.close()
        #expect(try sideCounts(path).recent > 0)
        #expect(try layoutVersion(path) == withUnsafeBytes(of: LedgerSchema.layoutVersion.bigEndian) { Array($0) })
    }

    @Test(
        "a layout-7 ledger, with memberships waiting in recentInstanceTopics, is refused by readers and upgraded in place by its first writer: they move to instanceTopics, the old database goes, same state, sound"
    )
    func upgradeFromLayout7() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let history = RandomHistory(tokenCount: 8, topicCount: 4)
        var generator = SeededGenerator(seed: 67)
        let path = try await movedLedger(directory, history, &generator)
        // Layout 7 kept new memberships' instance side in recentInstanceTopics, keyed by instance: every other
        // instance's entries go there, as a writer of layout 7 would have left them.
        let waiting = try LMDBEnvironment(path: path).write { txn throws in
            let instanceTopics = try txn.openDatabase("instanceTopics", flags: [.duplicateSort, .duplicateFixed])
            let old = try txn.openDatabase("recentInstanceTopics", flags: [.create, .duplicateSort, .duplicateFixed])
            var entries: [([UInt8], [UInt8])] = []
            try txn.withCursor(instanceTopics) { cursor in
                try cursor.forEach { entry in
                    if entry.key.loadBigEndianUInt32() % 2 == 1 {
                        entries.append((Array(entry.key), Array(entry.value)))
                    }
                    return true
                }
            }
            for (key, value) in entries {
                #expect(try txn.delete(instanceTopics, key: key, value: value))
                try txn.put(old, key: key, value: value)
            }
            try txn.drop(try txn.openDatabase("recentMemberships"))
            try txn.put(try txn.openDatabase("meta"), key: "layoutVersion", value: UInt32(7))
            return entries.count
        }
        #expect(waiting > 0)
        let ledger = try expectUpgraded(directory, history)
        ledger.close()
        let (moved, recent) = try sideCounts(path)
        #expect(recent == 0)
        #expect(moved > waiting)
        #expect(try layoutVersion(path) == withUnsafeBytes(of: LedgerSchema.layoutVersion.bigEndian) { Array($0) })
        let gone = #expect(throws: LMDBError.self) {
            try LMDBEnvironment(path: path).read { txn throws in _ = try txn.openDatabase("recentInstanceTopics") }
        }
        #expect(gone?.code == .notFound)
    }

    @Test(
        "an instance's topic count, first asked after others' were, counts what waits in recentMemberships as it is then: after an unsubscribe from it and after a move out of it",
        arguments: [false, true]
    )
    func countsOfRecentMemberships(move: Bool) async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let a = try RegistrationToken("tok-a:APA91b1")
        let b = try RegistrationToken("tok-b:APA91b2")
        func topic(_ name: String) throws -> TopicName { try TopicName(name) }
        func request(_ operations: [LedgerOperation]) -> WriteRequest {
            WriteRequest(actor: "test", requestID: "r", operations: operations)
        }
        // With `move`, three waiting memberships fill the recent side: the commit that adds the third moves them.
        func open() throws -> Ledger {
            try openTestLedger(directory) { options in
                options.limits.maximumTopicsPerInstance = 3
                options.limits.recentMembershipsBeforeMove = move ? 3 : 1_000
            }
        }
        do {
            let ledger = try open()
            let held = try (1...(move ? 2 : 3)).map { LedgerOperation.subscribe(b, try topic("t\($0)"), via: .v1) }
            _ = try await ledger.append(
                request([.register(a, platform: nil, appID: nil), .register(b, platform: nil, appID: nil)] + held))
            ledger.close()
        }
        // A new writer knows no counts. a's is asked first, which reads every instance's waiting count (b: 3, or 2
        // with `move`); then b loses t1, its count not asked (an unsubscribe needs none) — or, with `move`, a's
        // new membership is the third waiting and all three move —; then b's count is asked, for a new topic:
        // b holds 2 of 3, so it is taken. Had the waiting count not followed, b would seem to hold 3 (4).
        let ledger = try open()
        let first = try await ledger.append(
            request(
                move
                    ? [.subscribe(a, try topic("t1"), via: .v1)]
                    : [.subscribe(a, try topic("t1"), via: .v1), .unsubscribe(b, try topic("t1"), via: .v1)]))
        #expect(first.outcomes.allSatisfy { $0.seq != nil && $0.rejection == nil }, "\(first.outcomes)")
        let second = try await ledger.append(request([.subscribe(b, try topic("t4"), via: .v1)]))
        #expect(second.outcomes[0].seq != nil && second.outcomes[0].rejection == nil, "\(second.outcomes)")
        let third = try await ledger.append(request([.subscribe(b, try topic("t5"), via: .v1)]))
        #expect(third.outcomes[0].rejection?.code == .tooManyTopics, "\(third.outcomes)")
        #expect(try ledger.verify().isSound)
        let path = ledger.directory
        ledger.close()
        // With `move`, a's t1 and b's t1 and t2 moved; b's t4 waits.
        let (moved, recent) = try sideCounts(path)
        #expect(move ? moved == 3 && recent == 1 : moved == 0 && recent == 4, "\(moved) moved, \(recent) waiting")
    }
}
