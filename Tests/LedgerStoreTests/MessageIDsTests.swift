import Foundation
import LMDBKit
import LedgerCore
@testable import LedgerStore
import LedgerTestSupport
import Testing
import LedgerQueries

/// Message ids follow the order of the sends and read as the send's time (`MessageIDs`), are unique per
/// project whatever the clock does, and step over ids a ledger of random ids already holds.
@Suite("Message ids", .offThePool)
struct MessageIDsTests {
    static let topic = try! TopicName("news")

    static func send(_ count: Int) -> [LedgerOperation] {
        (0..<count).map { _ in .send(.topic(topic), precedence: .leftToRight, messageJSON: Array("{}".utf8)) }
    }

    static func sentIDs(_ receipt: WriteReceipt) -> [UInt64] {
        receipt.outcomes.compactMap { outcome in
            if case .sent(_, let id) = outcome { return id }
            return nil
        }
    }

    @Test("the first id to try: the time's, after the last one, none past 2^63-1")
    func candidates() {
        let time = LedgerTime(microseconds: 1_795_000_000_000_000)
        #expect(MessageIDs.candidate(at: time, after: 0) == 1_795_000_000_000_000_000)
        #expect(MessageIDs.candidate(at: time, after: 1_795_000_000_000_000_041) == 1_795_000_000_000_000_042)
        // An id of the random era far above the time's: the next one after it.
        #expect(MessageIDs.candidate(at: time, after: 8_000_000_000_000_000_000) == 8_000_000_000_000_000_001)
        #expect(MessageIDs.candidate(at: time, after: MessageIDs.largest - 1) == MessageIDs.largest)
        #expect(MessageIDs.candidate(at: time, after: MessageIDs.largest) == nil)
        // Times no id can carry count as the smallest id's.
        for micros in [Int64.min, -1, 0, Int64.max, Int64.max / 1000 + 1] {
            #expect(MessageIDs.candidate(at: LedgerTime(microseconds: micros), after: 0) == 1)
            #expect(MessageIDs.candidate(at: LedgerTime(microseconds: micros), after: 7) == 8)
        }
        let last = LedgerTime(microseconds: Int64.max / 1000)
        #expect(MessageIDs.candidate(at: last, after: 0) == UInt64(Int64.max / 1000) * 1000)
    }

    @Test("ids increase with the sends, across commits, with a clock that stands still or goes back")
    func ordered() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        var ids: [UInt64] = []
        // The clock's own time: each id is its send's time in microseconds, times 1000, plus a count.
        for round in 0..<3 {
            let receipt = try await ledger.append(
                WriteRequest(actor: "t", requestID: "now-\(round)", operations: Self.send(5)))
            let sent = Self.sentIDs(receipt)
            #expect(sent.count == 5)
            #expect(sent.allSatisfy { $0 / MessageIDs.perMicrosecond >= UInt64(receipt.time.microseconds) })
            ids += sent
        }
        // A time that stands still for more sends than one microsecond's thousand, in several requests, then
        // one earlier than every id so far (refused: times never decrease) and the same time again. An hour
        // ahead of the clock, so that the audiences recorded meanwhile take it too (a minute ran out on a loaded
        // machine: an audience recorded at the clock's time came after it, and the still time was refused).
        let still = LedgerTime(microseconds: Int64(ids.last! / MessageIDs.perMicrosecond) + 3_600_000_000)
        for round in 0..<3 {
            let receipt = try await ledger.append(
                WriteRequest(actor: "t", requestID: "still-\(round)", time: still, operations: Self.send(700)))
            ids += Self.sentIDs(receipt)
        }
        await #expect(throws: (any Error).self) {
            _ = try await ledger.append(
                WriteRequest(
                    actor: "t", requestID: "back", time: LedgerTime(microseconds: 1), operations: Self.send(1)))
        }
        ids += Self.sentIDs(
            try await ledger.append(WriteRequest(actor: "t", requestID: "again", time: still, operations: Self.send(3)))
        )
        #expect(ids.count == 15 + 2100 + 3)
        #expect(zip(ids, ids.dropFirst()).allSatisfy { $0 < $1 })
        #expect(ids.allSatisfy { $0 >= 1 && $0 <= MessageIDs.largest })
        #expect(ids[15] == UInt64(still.microseconds) * MessageIDs.perMicrosecond)
        #expect(ids.last! == ids[15] + 2102)
        // Every id names its own send.
        ledger.waitForAudiences()
        try ledger.read { snapshot in
            var sendSeqs = Set<UInt64>()
            for id in ids {
                let replay = try #require(try MessageReplay.replay(id, in: snapshot))
                sendSeqs.insert(replay.seq)
            }
            #expect(sendSeqs.count == ids.count)
        }
        #expect(try ledger.verify().isSound)
    }

    @Test("a ledger of random ids: the writer steps over the ids it holds, and past 2^63-1 picks at random")
    func randomEra() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let time = LedgerTime(microseconds: 4_000_000_000_000_000)  // 2096: after the clock's time
        let first = UInt64(time.microseconds) * MessageIDs.perMicrosecond
        let ledgerDirectory: String
        do {
            let ledger = try openTestLedger(directory)
            let token = try RegistrationToken("device")
            _ = try await ledger.append(
                WriteRequest(
                    actor: "t", requestID: "setup",
                    operations: [.register(token, platform: nil, appID: nil), .subscribe(token, Self.topic, via: .v1)]))
            ledgerDirectory = ledger.directory
            ledger.close()
        }
        // What a ledger of the random era may hold: messages at the ids the writer would try next.
        let taken = [first, first + 1, first + 3]
        try Self.withRawDatabase(ledgerDirectory, "messages") { txn, messages in
            for id in taken {
                try txn.put(messages, key: id, value: MessageState(sendSeq: 1, audienceSeq: 0).encoded)
            }
        }
        do {
            let ledger = try openTestLedger(directory)
            let receipt = try await ledger.append(
                WriteRequest(actor: "t", requestID: "send", time: time, operations: Self.send(3)))
            #expect(Self.sentIDs(receipt) == [first + 2, first + 4, first + 5])
            ledger.waitForAudiences()
            ledger.close()
        }

        // The message sent last holds the largest id: the next send cannot follow it and picks at random,
        // and the one after follows that.
        try Self.withRawDatabase(ledgerDirectory, "sends") { txn, sends in
            let last = try txn.withCursor(sends) { try #require(try $0.last()).key.loadBigEndianUInt64() }
            try txn.put(sends, key: last, value: MessageIDs.largest)
        }
        let reopened = try openTestLedger(directory)
        defer { reopened.close() }
        let after = Self.sentIDs(
            try await reopened.append(WriteRequest(actor: "t", requestID: "late", time: time, operations: Self.send(2)))
        )
        #expect(after.count == 2)
        #expect(after[0] >= 1 && after[0] < MessageIDs.largest && !taken.contains(after[0]))
        // The first free id from the time's or the random one's next, whichever is higher.
        let held = Set(taken + [first + 2, first + 4, first + 5, after[0]])
        var next = max(first, after[0] + 1)
        while held.contains(next) { next += 1 }
        #expect(after[1] == next)
    }

    static func withRawDatabase(
        _ directory: String, _ name: String, _ body: (LMDBTransaction, LMDBDatabase) throws -> Void
    ) throws {
        let environment = try LMDBEnvironment(path: directory)
        try environment.write { txn in try body(txn, try txn.openDatabase(name)) }
    }
}
