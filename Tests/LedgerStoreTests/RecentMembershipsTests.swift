import Foundation
import LMDBKit
import LedgerCore
import LedgerStore
import LedgerTestSupport
import Testing

/// The instance side of new memberships waits in `recentInstanceTopics` and moves to `instanceTopics` in
/// batches (`RecentMemberships`): wherever an entry sits, every read answers alike.
@Suite("Recent memberships: the instance side's two databases")
struct RecentMembershipsTests {
    /// The entries of each of the instance side's databases.
    private func sideCounts(_ directory: String) throws -> (moved: Int, recent: Int) {
        let environment = try LMDBEnvironment(path: directory)
        return try environment.read { txn throws in
            (
                try txn.count(try txn.openDatabase("instanceTopics")),
                try txn.count(try txn.openDatabase("recentInstanceTopics"))
            )
        }
    }

    @Test(
        "one random history appended with moves at every commit, every 7 entries and never: the same state at every seq, subscriptions, statistics and audits, the same instance side, a sound verify; after each commit fewer than the limit wait"
    )
    func splitChangesNoRead() async throws {
        for seed: UInt64 in [3, 41, 977] {
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
                for request in requests {
                    _ = try await ledger.append(request)
                    // The move runs at the end of the commit that reaches the limit.
                    #expect(try sideCounts(path).recent < max(limit, 1), "seed \(seed), limit \(limit)")
                }
                let head = try ledger.readLog { try $0.head().seq }
                observed[limit] = try (0...head).map { seq in
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
        for database in ["recentInstanceTopics", "instanceTopics"] {
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

            // Instance 1 holding topic 0x7fff since seq 1: no event says so.
            do {
                let environment = try LMDBEnvironment(path: path)
                try environment.write { txn throws in
                    let forged: [UInt8] = [0, 0, 0x7f, 0xff, 0, 0, 0, 0, 0, 0, 0, 1]
                    try txn.put(try txn.openDatabase(database), key: [0, 0, 0, 1] as [UInt8], value: forged)
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

    @Test(
        "a layout-6 ledger (no recentInstanceTopics) is refused by readers with the way to upgrade it, and upgraded in place by its first writer: same state, sound, and new memberships wait in the new database"
    )
    func upgradeFromLayout6() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let history = RandomHistory(tokenCount: 8, topicCount: 4)
        var generator = SeededGenerator(seed: 61)
        let path: String
        do {
            // Moves at every commit: all memberships in instanceTopics, as layout 6 kept them.
            let ledger = try openTestLedger(directory) { options in
                options.limits.recentMembershipsBeforeMove = 0
                options.recordsAudiences = false
            }
            path = ledger.directory
            _ = try await appendAll(history.requests(count: 40, using: &generator), to: ledger)
            ledger.close()
        }
        #expect(try sideCounts(path).moved > 0)
        do {
            let environment = try LMDBEnvironment(path: path)
            try environment.write { txn throws in
                try txn.drop(try txn.openDatabase("recentInstanceTopics"))
                try txn.put(try txn.openDatabase("meta"), key: "layoutVersion", value: UInt32(6))
            }
        }
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
        let more = history.requests(count: 20, using: &generator)
        _ = try await appendAll(more, to: ledger)
        #expect(try ledger.verify().isSound)
        ledger.close()
        #expect(try sideCounts(path).recent > 0)
        let version = try LMDBEnvironment(path: path).read { txn throws in
            try txn.value(in: try txn.openDatabase("meta"), forKey: "layoutVersion")
        }
        #expect(version == [0, 0, 0, 7])
    }
}
