import Foundation
import LMDBKit
import LedgerCore
import LedgerTestSupport
import Testing

@testable import LedgerStore

/// `RecentMemberships.moveIfFull` on its own: whole partitions, going round them.
@Suite("Recent memberships: moving partitions", .offThePool)
struct RecentMembershipsMoveTests {
    /// instance → its topics in `instanceTopics`, with the seq each began at.
    private func moved(_ txn: LMDBTransaction, _ schema: LedgerSchema) throws -> [UInt32: [String]] {
        var result: [UInt32: [String]] = [:]
        try txn.withCursor(schema.instanceTopics) { cursor in
            try cursor.forEach { entry in
                let membership = StoredMembership(entry.value)
                result[entry.key.loadBigEndianUInt32(), default: []].append("\(membership.id)@\(membership.since)")
                return true
            }
        }
        return result
    }

    /// partition → the instances with entries in it.
    private func waiting(_ txn: LMDBTransaction, _ schema: LedgerSchema) throws -> [UInt32: Set<UInt32>] {
        var result: [UInt32: Set<UInt32>] = [:]
        try txn.withCursor(schema.recentMemberships) { cursor in
            try cursor.forEach { entry in
                result[entry.key.loadBigEndianUInt32(), default: []].insert(
                    RecentMemberships.Entry(entry.value).instance)
                return true
            }
        }
        return result
    }

    @Test(
        "at the limit, whole partitions move, each instance's entries sorted by topic with their seqs, until fewer than the limit wait; the next move goes on after the last partition moved and round to the first; every moved instance is named"
    )
    func partitionsGoRound() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let environment = try LMDBEnvironment(path: directory.path)
        let cursor = RecentMemberships.MoveCursor()
        let size = UInt32(1) << RecentMemberships.partitionShift
        var seq: UInt64 = 0
        try environment.write { txn throws in
            let schema = try LedgerSchema(txn)
            func wait(_ instance: UInt32, topics: [UInt32]) throws {
                for topic in topics {
                    seq += 1
                    try RecentMemberships.add(topic, instance: instance, since: seq, txn: txn, schema: schema)
                }
            }
            var named: [UInt32] = []
            func move(limit: Int) throws -> Int {
                try RecentMemberships.moveIfFull(txn: txn, schema: schema, limit: limit, cursor: cursor) {
                    named.append($0)
                }
            }
            // Partition 0 (instances 1 ..< size), 1 (size ..< 2 size), 2 (2 size ...); the entries of one partition
            // interleaved in seq order, topics out of order.
            try wait(2, topics: [9])
            try wait(1, topics: [3, 1])
            try wait(size, topics: [4, 3, 2, 1])
            try wait(2, topics: [5])
            try wait(1, topics: [2])
            try wait(2 * size + 8, topics: [5, 6, 7])
            #expect(try waiting(txn, schema) == [0: [1, 2], 1: [size], 2: [2 * size + 8]])
            #expect(try txn.count(schema.recentMemberships) == 12)

            // 12 wait, limit 10: partition 0 moves (5 entries), and 7 wait.
            #expect(try move(limit: 10) == 5)
            #expect(try moved(txn, schema) == [1: ["1@3", "2@9", "3@2"], 2: ["5@8", "9@1"]])
            #expect(try waiting(txn, schema) == [1: [size], 2: [2 * size + 8]])
            #expect(named == [1, 2])
            #expect(cursor.next == 1)

            // Under the limit: nothing moves.
            try wait(3, topics: [4, 5])
            #expect(try move(limit: 10) == 0)

            // 10 wait: the round goes on at partition 1.
            try wait(3, topics: [6])
            #expect(try move(limit: 10) == 4)
            #expect(try moved(txn, schema)[size] == ["1@7", "2@6", "3@5", "4@4"])
            #expect(try waiting(txn, schema) == [0: [3], 2: [2 * size + 8]])
            #expect(cursor.next == 2)

            // Partition 2, then past the last partition round to the first: partition 0, until fewer than 4 wait.
            try wait(size + 1, topics: [1])
            named = []
            #expect(try move(limit: 4) == 3 + 3)
            #expect(named == [2 * size + 8, 3])
            #expect(try waiting(txn, schema) == [1: [size + 1]])
            #expect(cursor.next == 1)

            // Limit 0: everything, whatever the cursor.
            try wait(1, topics: [7])
            #expect(try move(limit: 0) == 2)
            #expect(try txn.count(schema.recentMemberships) == 0)
            #expect(try txn.count(schema.instanceTopics) == 5 + 4 + 3 + 3 + 1 + 1)
            #expect(try moved(txn, schema)[1] == ["1@3", "2@9", "3@2", "7@\(seq)"])
        }
    }

    @Test(
        "a membership already on the moved side is refused as corrupt, and the transaction that found it commits nothing"
    )
    func bothSidesRefused() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let environment = try LMDBEnvironment(path: directory.path)
        let cursor = RecentMemberships.MoveCursor()
        let schema = try environment.write { try LedgerSchema($0) }
        let refusal = #expect(throws: StoreError.self) {
            try environment.write { txn throws in
                for topic: UInt32 in 1...3 {
                    try RecentMemberships.add(topic, instance: 5, since: 1, txn: txn, schema: schema)
                }
                try txn.put(schema.instanceTopics, key: UInt32(5), value: membershipValue(2, since: 1))
                try RecentMemberships.moveIfFull(txn: txn, schema: schema, limit: 0, cursor: cursor)
            }
        }
        #expect(refusal?.code == .corrupt)
        #expect(refusal?.message == "instance 5 holds a membership on both of its sides")
        try environment.read { txn throws in
            #expect(try txn.count(schema.recentMemberships) == 0)
            #expect(try txn.count(schema.instanceTopics) == 0)
        }
    }

    @Test("an entry in a partition its instance does not belong to is refused as corrupt by every reader of it")
    func misplacedEntryRefused() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let environment = try LMDBEnvironment(path: directory.path)
        let schema = try environment.write { try LedgerSchema($0) }
        let size = UInt32(1) << RecentMemberships.partitionShift
        try environment.write { txn throws in
            // Instance 5 belongs to partition 0, the entry's instance to partition 1.
            try txn.put(
                schema.recentMemberships, key: UInt32(0),
                value: RecentMemberships.Entry(since: 1, instance: size + 5, topic: 2).encoded)
        }
        try environment.read { txn throws in
            let refusal = #expect(throws: StoreError.self) {
                try RecentMemberships.forEachMembership(of: 5, txn: txn, schema: schema) { _, _ in }
            }
            #expect(refusal?.code == .corrupt)
            #expect(refusal?.message == "recentMemberships holds instance \(size + 5) in another partition")
        }
    }
}
