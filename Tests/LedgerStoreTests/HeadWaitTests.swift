import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import Testing

/// `Ledger.waitForHead`: a read that names an earlier write's seq is woken by the commit that reaches it.
@Suite("Waiting for the head", .offThePool)
struct HeadWaitTests {
    private func register(_ ledger: Ledger, _ index: Int) async throws -> UInt64 {
        let receipt = try await ledger.append(
            WriteRequest(
                actor: "t", requestID: "r\(index)",
                operations: [.register(try RegistrationToken("head-\(index):APA91b"), platform: nil, appID: nil)]))
        return try #require(receipt.outcomes.first?.seq)
    }

    @Test("a wait returns at once for a seq already there, when a commit reaches it, and false after its timeout")
    func wakes() async throws {
        try await withTestLedger { ledger in
            let first = try await register(ledger, 0)
            #expect(await ledger.waitForHead(first, upTo: .milliseconds(1)))
            // Several waiters for the next seqs, woken by the commits that reach them, in any order.
            async let second = ledger.waitForHead(first + 1, upTo: .seconds(30))
            async let third = ledger.waitForHead(first + 2, upTo: .seconds(30))
            async let never = ledger.waitForHead(first + 1_000, upTo: .milliseconds(300))
            try await Task.sleep(for: .milliseconds(50))
            _ = try await register(ledger, 1)
            _ = try await register(ledger, 2)
            let (reachedSecond, reachedThird, reachedNever) = await (second, third, never)
            #expect(reachedSecond && reachedThird)
            #expect(!reachedNever, "the timeout ends a wait the head never reaches")
        }
    }

    @Test("a cancelled wait returns false, before or after it began to wait")
    func cancelled() async throws {
        try await withTestLedger { ledger in
            let waiting = Task { await ledger.waitForHead(99, upTo: .seconds(60)) }
            try await Task.sleep(for: .milliseconds(50))
            waiting.cancel()
            #expect(await waiting.value == false)
            let early = Task {
                withUnsafeCurrentTask { $0?.cancel() }
                return await ledger.waitForHead(99, upTo: .seconds(60))
            }
            #expect(await early.value == false)
            // The next wait is not disturbed by those that ended.
            async let next = ledger.waitForHead(1, upTo: .seconds(30))
            _ = try await register(ledger, 0)
            let reached = await next
            #expect(reached)
        }
    }

    @Test("a watermark's bumps from many tasks at once each raise it by one")
    func concurrentBumps() async {
        let mark = Watermark()
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<2_000 { group.addTask { mark.bump() } }
        }
        #expect(mark.level == 2_000)
        mark.advance(to: 10)
        #expect(mark.level == 2_000, "a lower level changes nothing")
    }
}
