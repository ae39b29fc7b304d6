import Foundation
import LMDBKit
import LedgerCore
import LedgerTestSupport
import Testing

@testable import LedgerStore

/// `RecentMemberships.moveIfFull` on its own: slices of whole instances, going round them.
@Suite("Recent memberships: moving slices")
struct RecentMembershipsMoveTests {
    /// instance → its (topic, since) entries in `database`.
    private func entries(_ txn: LMDBTransaction, _ database: LMDBDatabase) throws -> [UInt32: [UInt32]] {
        var result: [UInt32: [UInt32]] = [:]
        try txn.withCursor(database) { cursor in
            try cursor.forEach { entry in
                result[entry.key.loadBigEndianUInt32(), default: []].append(StoredMembership(entry.value).id)
                return true
            }
        }
        return result
    }

    @Test(
        "at the limit, whole instances move in key order, a quarter of the limit at a time, until fewer than the limit wait; the next move goes on after the last instance moved and round to the first"
    )
    func slicesGoRound() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let environment = try LMDBEnvironment(path: directory.path)
        let cursor = RecentMemberships.MoveCursor()
        try environment.write { txn throws in
            let schema = try LedgerSchema(txn)
            func wait(_ instance: UInt32, topics: ClosedRange<UInt32>) throws {
                for topic in topics {
                    try txn.put(schema.recentInstanceTopics, key: instance, value: membershipValue(topic, since: 1))
                }
            }
            for instance: UInt32 in 1...10 { try wait(instance, topics: 1...3) }
            // 30 wait, limit 12: slices of 3 entries, here one instance each, until 9 wait.
            #expect(try RecentMemberships.moveIfFull(txn: txn, schema: schema, limit: 12, cursor: cursor) == 21)
            #expect(
                try entries(txn, schema.instanceTopics)
                    == Dictionary(uniqueKeysWithValues: (1...7).map { ($0, [1, 2, 3]) }))
            #expect(try Array(entries(txn, schema.recentInstanceTopics).keys).sorted() == [8, 9, 10])
            #expect(cursor.next == 8)

            // Under the limit: nothing moves.
            try wait(1, topics: 4...5)
            #expect(try RecentMemberships.moveIfFull(txn: txn, schema: schema, limit: 12, cursor: cursor) == 0)

            // 12 wait: the round goes on at 8, and stops as soon as fewer than 12 wait.
            try wait(2, topics: 4...4)
            #expect(try RecentMemberships.moveIfFull(txn: txn, schema: schema, limit: 12, cursor: cursor) == 3)
            #expect(try Array(entries(txn, schema.recentInstanceTopics).keys).sorted() == [1, 2, 9, 10])
            #expect(cursor.next == 9)

            // 18 wait: 9, 10, then round to the first instances — 1 (2 entries) is not a slice alone, so 2
            // comes too — and 3, which gathered the most, waits for the next round.
            try wait(3, topics: 4...12)
            #expect(try RecentMemberships.moveIfFull(txn: txn, schema: schema, limit: 12, cursor: cursor) == 9)
            #expect(try entries(txn, schema.recentInstanceTopics) == [3: Array(4...12)])
            #expect(try entries(txn, schema.instanceTopics)[1] == [1, 2, 3, 4, 5])
            #expect(try entries(txn, schema.instanceTopics)[2] == [1, 2, 3, 4])
            #expect(cursor.next == 3)

            // Limit 0: everything, whatever the cursor.
            #expect(try RecentMemberships.moveIfFull(txn: txn, schema: schema, limit: 0, cursor: cursor) == 9)
            #expect(try txn.count(schema.recentInstanceTopics) == 0)
            #expect(try txn.count(schema.instanceTopics) == 10 * 3 + 2 + 1 + 9)
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
                    try txn.put(schema.recentInstanceTopics, key: UInt32(5), value: membershipValue(topic, since: 1))
                }
                try txn.put(schema.instanceTopics, key: UInt32(5), value: membershipValue(2, since: 1))
                try RecentMemberships.moveIfFull(txn: txn, schema: schema, limit: 0, cursor: cursor)
            }
        }
        #expect(refusal?.code == .corrupt)
        #expect(refusal?.message == "instance 5 holds a membership on both of its sides")
        try environment.read { txn throws in
            #expect(try txn.count(schema.recentInstanceTopics) == 0)
            #expect(try txn.count(schema.instanceTopics) == 0)
        }
    }
}
