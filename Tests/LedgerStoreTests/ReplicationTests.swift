import Foundation
import LMDBKit
import LedgerCore
import LedgerQueries
import LedgerStore
import LedgerTestSupport
import Synchronization
import Testing

/// A gate that keeps what it is given (as etcd would) or refuses it.
private final class RecordingGate: ReplicationGate {
    let blocks = Mutex<[ReplicatedBlock]>([])
    let refusal = Mutex<ReplicationRefusal?>(nil)
    let confirmations = Mutex(0)

    func replicate(_ block: ReplicatedBlock) throws {
        if let refusal = refusal.withLock({ $0 }) { throw refusal }
        blocks.withLock { $0.append(block) }
    }

    func confirmLeadership() throws {
        if let refusal = refusal.withLock({ $0 }) { throw refusal }
        confirmations.withLock { $0 += 1 }
    }
}

@Suite("Replication: a leader's gate and a follower's apply", .offThePool)
struct ReplicationTests {
    @Test("a follower applying the leader's blocks holds the same log, projections and head, and verifies")
    func followerMatchesLeader() async throws {
        let leaderDirectory = TemporaryDirectory()
        let followerDirectory = TemporaryDirectory()
        defer {
            leaderDirectory.remove()
            followerDirectory.remove()
        }
        let gate = RecordingGate()
        let leader = try openTestLedger(leaderDirectory) { $0.replication = gate }
        let follower = try openTestLedger(followerDirectory) { $0.replication = RecordingGate() }
        var generator = SeededGenerator(seed: 44)
        let history = RandomHistory()
        // Concurrent appends, so that group commits hold several requests (and some hold a chainer's chunks).
        try await withThrowingTaskGroup(of: Void.self) { group in
            for chunk in history.requests(count: 300, using: &generator).chunked(into: 30) {
                group.addTask { for request in chunk { _ = try await leader.append(request) } }
            }
            let big = (0..<600).map { index in
                LedgerOperation.register(
                    try! RegistrationToken("bulk-\(index):APA91b"), platform: nil, appID: nil)
            }
            group.addTask { _ = try await leader.append(WriteRequest(actor: "t", requestID: "big", operations: big)) }
            try await group.waitForAll()
        }
        leader.waitForAudiences()
        let blocks = gate.blocks.withLock { $0 }
        #expect(blocks.count > 1)
        var expected: UInt64 = 1
        for block in blocks {
            #expect(block.firstSeq == expected)
            expected = block.lastSeq + 1
            #expect(try follower.applyReplicated(block) != .alreadyApplied)
        }
        let leaderHead = try leader.read { try $0.head() }
        let (leaderPath, followerPath) = (leader.directory, follower.directory)
        #expect(try follower.read { try $0.head() } == leaderHead)
        #expect(leaderHead.seq == expected - 1)
        // Applying a block again changes nothing.
        #expect(try follower.applyReplicated(blocks[blocks.count / 2]) == .alreadyApplied)
        leader.close()
        follower.close()
        let databases = ["log", "meta"] + projectionDatabases
        #expect(
            try rawDump(directory: leaderPath, databases: databases)
                == rawDump(directory: followerPath, databases: databases))
        let reopened = try openTestLedger(followerDirectory, mode: .readOnly)
        let report = try reopened.verify(checkAudiences: true)
        #expect(report.isSound, "\(report.problems)")
    }

    @Test("a block that does not chain, skips a seq, or differs from what is applied is refused, changing nothing")
    func forksAndGapsAreRefused() async throws {
        let leaderDirectory = TemporaryDirectory()
        let followerDirectory = TemporaryDirectory()
        defer {
            leaderDirectory.remove()
            followerDirectory.remove()
        }
        let gate = RecordingGate()
        let leader = try openTestLedger(leaderDirectory) { $0.replication = gate }
        let follower = try openTestLedger(followerDirectory) { $0.replication = RecordingGate() }
        for index in 0..<3 {
            _ = try await leader.append(
                WriteRequest(
                    actor: "t", requestID: "r\(index)",
                    operations: [.register(try RegistrationToken("tok-\(index):APA91b"), platform: nil, appID: nil)]))
        }
        let blocks = gate.blocks.withLock { $0 }
        #expect(blocks.count == 3)
        #expect(throws: StoreError.self) { try follower.applyReplicated(blocks[1]) }  // a gap
        _ = try follower.applyReplicated(blocks[0])
        var flipped = blocks[1]
        flipped.records[0][40] ^= 1  // a byte of the event: its hash no longer matches
        #expect(throws: StoreError.self) { try follower.applyReplicated(flipped) }
        var forked = blocks[1]
        forked.previousHash = [UInt8](repeating: 7, count: 32)
        #expect(throws: StoreError.self) { try follower.applyReplicated(forked) }
        var rewritten = blocks[0]
        rewritten.records[0][40] ^= 1
        #expect(throws: StoreError.self) { try follower.applyReplicated(rewritten) }
        #expect(try follower.read { try $0.head().seq } == 1)
        _ = try follower.applyReplicated(blocks[1])
        _ = try follower.applyReplicated(blocks[2])
        #expect(try follower.read { try $0.head() } == leader.read { try $0.head() })
    }

    @Test("a refusing gate aborts the commit: the requests fail with nothing written, and a no-op is confirmed")
    func refusalAbortsTheCommit() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let gate = RecordingGate()
        let leader = try openTestLedger(directory) { $0.replication = gate }
        let token = try RegistrationToken("tok-1:APA91b")
        _ = try await leader.append(
            WriteRequest(actor: "t", requestID: "r", operations: [.register(token, platform: nil, appID: nil)]))
        gate.refusal.withLock { $0 = ReplicationRefusal(.notLeader, "deposed") }
        let subscribe = WriteRequest(
            actor: "t", requestID: "s", operations: [.subscribe(token, try TopicName("news"), via: .v1)])
        await #expect(throws: StoreError.self) { try await leader.append(subscribe) }
        #expect(try leader.read { try $0.head().seq } == 1)
        // A request that would change nothing is refused too while the gate refuses…
        let again = WriteRequest(
            actor: "t", requestID: "a", operations: [.register(token, platform: nil, appID: nil)])
        await #expect(throws: StoreError.self) { try await leader.append(again) }
        gate.refusal.withLock { $0 = nil }
        // …and confirmed when it does not.
        _ = try await leader.append(again)
        #expect(gate.confirmations.withLock { $0 } == 1)
        _ = try await leader.append(subscribe)
        #expect(try leader.read { try $0.head().seq } == 2)
        #expect(gate.blocks.withLock { $0.map(\.firstSeq) } == [1, 2])
    }

    @Test("a block split into parts keeps the chain: each part follows the one before, and none is over the limit")
    func splitKeepsTheChain() {
        var hash = HashChain.genesis
        var records: [[UInt8]] = []
        for index in 0..<50 {
            var record: [UInt8] = []
            let event = LedgerEvent(
                seq: UInt64(index + 1), time: LedgerTime(microseconds: 1), actor: "t", requestID: "r",
                body: .registered(token: try! RegistrationToken("t\(index):APA91b"), platform: nil, appID: nil))
            HashChain.appendRecord(of: event, chainingFrom: &hash, to: &record)
            records.append(record)
        }
        let block = ReplicatedBlock(firstSeq: 1, previousHash: HashChain.genesis, records: records)
        let parts = block.split(maximumBytes: 500)
        #expect(parts.count > 1)
        #expect(parts.allSatisfy { $0.byteCount <= 500 })
        #expect(parts.flatMap(\.records) == records)
        for (part, next) in zip(parts, parts.dropFirst()) {
            #expect(next.firstSeq == part.lastSeq + 1)
            #expect(next.previousHash == part.lastHash)
        }
        #expect(parts.last?.lastHash == hash)
    }
}

extension Array {
    fileprivate func chunked(into size: Int) -> [[Element]] {
        stride(from: 0, to: count, by: size).map { Array(self[$0..<Swift.min($0 + size, count)]) }
    }
}
