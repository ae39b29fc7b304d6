import APNsWire
import Testing

@testable import LedgerServer

@Suite("A broadcast lane beside the pushes: the settled seq never passes an unfinished broadcast; backoff")
struct PushSettlementTests {
    @Test("what the main loop records is held before the oldest broadcast the lane has not recorded")
    func mainLoopIsHeldBeforeUnfinishedBroadcasts() {
        var settlement = PushSettlement()
        settlement.mainPassed(4)
        #expect(settlement.settled(upTo: 4) == 4)
        // The broadcast at 5 is handed over; the main loop finishes 6 and 7.
        settlement.handed(5)
        settlement.mainPassed(5)
        settlement.mainPassed(7)
        #expect(settlement.settled(upTo: 7) == 4)
        settlement.handed(9)
        #expect(settlement.settled(upTo: 12) == 4)
        // 5 recorded: held before 9 now.
        settlement.broadcastRecorded(5)
        #expect(settlement.settled(upTo: 12) == 8)
        settlement.broadcastRecorded(9)
        #expect(settlement.settled(upTo: 12) == 12)
        #expect(settlement.unfinishedBroadcasts.isEmpty)
    }

    @Test("what the lane records with a broadcast is at most where the main loop got, and before any other")
    func laneIsHeldByTheMainLoopAndOtherBroadcasts() {
        var settlement = PushSettlement()
        // Before the main loop read where to start: 0, which moves nothing.
        #expect(settlement.settled(finishingBroadcast: 3) == 0)
        settlement.mainPassed(2)
        settlement.handed(3)
        settlement.handed(6)
        settlement.mainPassed(10)
        // 3 finishing: not past 6, which is not finished.
        #expect(settlement.settled(finishingBroadcast: 3) == 5)
        settlement.broadcastRecorded(3)
        // 6 finishing: as far as the main loop got.
        #expect(settlement.settled(finishingBroadcast: 6) == 10)
        // A broadcast handed twice (a second lead of the same node) is owed once.
        settlement.handed(12)
        settlement.handed(12)
        #expect(settlement.unfinishedBroadcasts == [6, 12])
        // Seq 1 as the oldest unfinished broadcast: 0, never an underflow.
        var first = PushSettlement()
        first.handed(1)
        #expect(first.settled(upTo: 5) == 0)
    }

    @Test("a broadcast is tried again after 1 s doubling to 60 s, or after APNs' Retry-After")
    func backoff() {
        let delays = (1...9).map { PushSettlement.retryDelay(afterFailures: $0, retryAfter: nil) }
        #expect(delays == [1, 2, 4, 8, 16, 32, 60, 60, 60].map { Duration.seconds($0) })
        #expect(PushSettlement.retryDelay(afterFailures: 0, retryAfter: nil) == .seconds(1))
        #expect(PushSettlement.retryDelay(afterFailures: 1_000_000, retryAfter: nil) == .seconds(60))
        #expect(PushSettlement.retryDelay(afterFailures: 5, retryAfter: 3) == .seconds(3))
        #expect(PushSettlement.retryDelay(afterFailures: 5, retryAfter: 0) == .seconds(1))
        #expect(PushSettlement.retryDelay(afterFailures: 1, retryAfter: 120) == .seconds(120))
    }

    @Test("Retry-After is taken as whole seconds, at most an hour; a date or anything else is not")
    func retryAfterIsBounded() {
        #expect(APNsChannelClient.Answer(status: 429, retryAfter: "7").retryAfter == 7)
        #expect(APNsChannelClient.Answer(status: 503, retryAfter: "86400").retryAfter == 3600)
        for value in ["", "-1", "1.5", " 2", "Wed, 21 Oct 2026 07:28:00 GMT", "9999999999"] {
            #expect(APNsChannelClient.Answer(status: 503, retryAfter: value).retryAfter == nil)
        }
        #expect(APNsChannelClient.Answer(status: 503).retryAfter == nil)
    }
}
