import Foundation
import LedgerCore
import LedgerTestSupport
import Testing

@testable import LedgerStore
import LedgerQueries

@Suite("Inbox", .offThePool)
struct InboxTests {
    @Test("a device back after weeks gets only the sends still alive, whether or not they are cached")
    func backAfterWeeks() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        // The store's clock stamps the audience events too, so the test sets it before each append.
        let clock = TestClock()
        let ledger = try openTestLedger(directory) { $0.clock = { clock.now } }
        defer { ledger.close() }
        let token = try RegistrationToken("back-after-weeks")
        let topic = try TopicName("news")
        let start = LedgerTime(parsing: "2026-03-01T00:00:00Z")!
        let week: Int64 = 7 * 24 * 3600 * 1_000_000
        func at(_ offset: Int64) -> LedgerTime { LedgerTime(microseconds: start.microseconds + offset) }
        func append(_ operation: LedgerOperation, time: LedgerTime) async throws -> UInt64 {
            clock.now = time
            let receipt = try await ledger.append(WriteRequest(actor: "t", requestID: "r", operations: [operation]))
            return try #require(receipt.outcomes[0].seq)
        }
        _ = try await append(.register(token, platform: nil, appID: nil), time: at(0))
        _ = try await append(.subscribe(token, topic, via: .v1), time: at(1))
        let early = try await append(.send(.topic(topic), precedence: .standard, messageJSON: []), time: at(2))
        let late = try await append(.send(.topic(topic), precedence: .standard, messageJSON: []), time: at(5 * week))

        func cursors(now: LedgerTime, cache: SendCache) throws -> [UInt64] {
            try ledger.read { snapshot in
                let instance = try #require(try snapshot.instanceID(of: token))
                return try snapshot.inbox(of: instance, after: 0, now: now, limit: 10, sends: cache).messages.map(
                    \.cursor)
            }
        }
        // Four weeks after the early send it has expired; the late one has not.
        let cold = SendCache(project: .default)
        #expect(try cursors(now: at(5 * week + 1), cache: cold) == [late])
        let warm = SendCache(project: .default)
        _ = try ledger.read { snapshot in try warm.send(at: early, in: snapshot) }
        #expect(warm.cached(at: early) != nil)
        #expect(try cursors(now: at(5 * week + 1), cache: warm) == [late])
        // Before the early send expires, both; long after the late one, neither.
        #expect(try cursors(now: at(3), cache: SendCache(project: .default)) == [early, late])
        #expect(try cursors(now: at(10 * week), cache: warm).isEmpty)
    }

    @Test("an inbox read through a bound stops there: what a cluster's leader holds past its acknowledged seq waits")
    func boundedThrough() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        let token = try RegistrationToken("bounded-inbox")
        let topic = try TopicName("news")
        var sends: [UInt64] = []
        for operation in [
            LedgerOperation.register(token, platform: nil, appID: nil), .subscribe(token, topic, via: .v1),
        ] + Array(repeating: LedgerOperation.send(.topic(topic), precedence: .standard, messageJSON: []), count: 3) {
            let receipt = try await ledger.append(WriteRequest(actor: "t", requestID: "r", operations: [operation]))
            if case .send = operation { sends.append(try #require(receipt.outcomes[0].seq)) }
        }
        ledger.waitForAudiences()
        func page(after: UInt64, through: UInt64) throws -> InboxPage {
            try ledger.read { snapshot in
                let instance = try #require(try snapshot.instanceID(of: token))
                return try snapshot.inbox(
                    of: instance, after: after, now: .now(), limit: 10, sends: SendCache(project: .default),
                    through: through)
            }
        }
        let bounded = try page(after: 0, through: sends[1])
        #expect(bounded.messages.map(\.cursor) == [sends[0], sends[1]])
        #expect(bounded.through == sends[1])
        #expect(try page(after: sends[1], through: sends[1]).messages.isEmpty)
        #expect(try page(after: sends[1], through: .max).messages.map(\.cursor) == [sends[2]])
    }
}

/// A clock the test sets.
private final class TestClock: @unchecked Sendable {
    // @unchecked: `time` is only touched with `lock` held.
    private let lock = NSLock()
    private var time = LedgerTime(microseconds: 0)
    var now: LedgerTime {
        get { lock.withLock { time } }
        set { lock.withLock { time = newValue } }
    }
}
