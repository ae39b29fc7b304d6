import LedgerCore
import Testing

@testable import LedgerCluster

/// A replica's state as `/v1/cluster`, `/readyz` and the metrics give it, from what its loop saw.
@Suite("ReplicaProgress: current, catching up, stalled")
struct ReplicaProgressTests {
    let start = ContinuousClock.now

    @Test("at the tail it is current; behind and applying, catching up; behind with nothing applied for 30 s, stalled")
    func states() {
        var progress = ReplicaProgress(at: start)
        #expect(progress.state(at: start, damage: nil, storageFailure: nil) == .current)
        progress.tail(120)
        #expect(progress.lagEvents == 120)
        #expect(progress.state(at: start + .seconds(29), damage: nil, storageFailure: nil) == .catchingUp)
        // It applies something: the 30 s start again.
        progress.applied(20, at: start + .seconds(29))
        #expect(progress.lagEvents == 100)
        #expect(progress.state(at: start + .seconds(58), damage: nil, storageFailure: nil) == .catchingUp)
        // Its loop fails the same way again and again: 30 s after it last moved it is stalled, with the failure.
        progress.failed("RPCError resourceExhausted: message too large")
        let stalled = progress.state(at: start + .seconds(60), damage: nil, storageFailure: nil)
        #expect(stalled.isStalled)
        #expect(stalled.description.hasPrefix("stalled: nothing applied for 30 s, 100 events behind"))
        #expect(stalled.description.hasSuffix("message too large"))
        // Applying the rest clears it, and the failure with it.
        progress.applied(120, at: start + .seconds(61))
        #expect(progress.state(at: start + .seconds(200), damage: nil, storageFailure: nil) == .current)
        #expect(progress.lastFailure == nil)
    }

    @Test("a damaged replica or one that cannot write is stalled at once, at the tail or not")
    func damageAndStorage() {
        var progress = ReplicaProgress(at: start)
        progress.applied(5, at: start)
        #expect(
            progress.state(at: start, damage: "a fork", storageFailure: nil) == .stalled(reason: "a fork"))
        #expect(
            progress.state(at: start, damage: nil, storageFailure: "the ledger's disk is full")
                == .stalled(reason: "the ledger's disk is full"))
        #expect(ReplicaProgress.State.catchingUp.description == "catching up")
    }

    @Test("a tail read again never moves back, and standing at it counts as moving")
    func tailOnlyGrows() {
        var progress = ReplicaProgress(at: start)
        progress.tail(50)
        progress.tail(10)
        #expect(progress.lagEvents == 50)
        progress.applied(50, at: start + .seconds(40))
        progress.applied(50, at: start + .seconds(80))
        #expect(progress.state(at: start + .seconds(100), damage: nil, storageFailure: nil) == .current)
    }

    @Test("a replica the tail leaves behind counts its 30 s from the moment it did, however long it stood at it")
    func leftBehindByTheTail() {
        var progress = ReplicaProgress(at: start)
        progress.applied(10, at: start)
        progress.tail(10, at: start)
        // Nothing is written for a minute, and nothing observes the replica meanwhile; then the tail moves.
        progress.tail(20, at: start + .seconds(60))
        #expect(progress.state(at: start + .seconds(61), damage: nil, storageFailure: nil) == .catchingUp)
        #expect(progress.state(at: start + .seconds(90), damage: nil, storageFailure: nil) == .catchingUp)
        #expect(progress.state(at: start + .seconds(91), damage: nil, storageFailure: nil).isStalled)
        // A replica already behind is not moved by the tail moving further.
        progress.tail(30, at: start + .seconds(80))
        #expect(progress.stallsAt == start + .seconds(90))
    }

    @Test("stallsAt is the moment a replica that moves no more goes from catching up to stalled")
    func stallsAtIsTheMoment() {
        var progress = ReplicaProgress(at: start)
        progress.tail(50, at: start)
        progress.applied(20, at: start + .seconds(5))
        let moment = progress.stallsAt
        #expect(moment == start + .seconds(5) + ReplicaProgress.stallAfter)
        #expect(progress.state(at: moment, damage: nil, storageFailure: nil) == .catchingUp)
        #expect(progress.state(at: moment + .nanoseconds(1), damage: nil, storageFailure: nil).isStalled)
    }

    @Test("catch-up reads are bounded by bytes: the largest blocks any configuration allows fit the receive limit")
    func rangesFitTheReceiveLimit() {
        let largest = ClusterConfiguration.blockBytesRange.upperBound
        let perRange = EtcdClient.blocksPerRange(maximumBlockBytes: largest)
        #expect(perRange >= 1)
        // Each stored block: its records, a tag and length for each (≤ 4 bytes, a record being over 32 bytes),
        // and its key and header.
        let storedBlock = largest + largest / 8 + 4096
        #expect(Int(perRange) * storedBlock <= EtcdClient.rangeBudgetBytes)
        #expect(EtcdClient.rangeBudgetBytes < EtcdClient.receiveLimitBytes)
        // Smaller blocks: more of them a read, never fewer than one.
        #expect(EtcdClient.blocksPerRange(maximumBlockBytes: 64 << 10) > perRange)
        #expect(EtcdClient.blocksPerRange(maximumBlockBytes: EtcdClient.receiveLimitBytes) == 1)
    }
}
