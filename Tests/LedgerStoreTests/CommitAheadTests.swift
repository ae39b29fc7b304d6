import Foundation
import LMDBKit
import LedgerCore
import LedgerQueries
@testable import LedgerStore
import LedgerTestSupport
import Synchronization
import Testing

/// A gate that commits ahead: it admits every block (or refuses while `refusal` is set), holds each block handed
/// over until the test answers it, as etcd would, and says through `handed` how many it holds.
private final class AheadGate: ReplicationGate {
    let refusal = Mutex<ReplicationRefusal?>(nil)
    let waiting = Mutex<[(block: ReplicatedBlock, answer: @Sendable (ReplicationRefusal?) -> Void)]>([])
    let replicated = Mutex<[ReplicatedBlock]>([])
    let handed = Watermark()
    /// What the gate says etcd holds, stored by the transaction (``MetaKey/clusterHeld``).
    let held = Mutex<UInt64>(0)

    var commitsAhead: Bool { true }

    /// The end of the last block handed over: each block admitted must follow it, as the real gate checks.
    let last = Mutex((seq: UInt64(0), hash: HashChain.genesis))
    let failedCommits = Mutex(0)

    func admitAhead(_ block: ReplicatedBlock) throws -> UInt64 {
        if let refusal = refusal.withLock({ $0 }) { throw refusal }
        let follows = last.withLock {
            block.records.isEmpty || (block.firstSeq == $0.seq + 1 && block.previousHash == $0.hash)
        }
        guard follows else {
            throw ReplicationRefusal(.staleTail, "block \(block.firstSeq) does not follow the last handed over")
        }
        return held.withLock { $0 }
    }

    func handOver(_ block: ReplicatedBlock, acknowledged: @escaping @Sendable (ReplicationRefusal?) -> Void) {
        if !block.records.isEmpty { last.withLock { $0 = (block.lastSeq, block.lastHash) } }
        waiting.withLock { $0.append((block, acknowledged)) }
        handed.bump()
    }

    func commitFailed(_ error: any Error) { failedCommits.withLock { $0 += 1 } }

    func replicate(_ block: ReplicatedBlock) throws {
        if let refusal = refusal.withLock({ $0 }) { throw refusal }
        replicated.withLock { $0.append(block) }
    }

    func confirmLeadership() throws {
        if let refusal = refusal.withLock({ $0 }) { throw refusal }
    }

    /// Waits until `count` blocks in all were handed over.
    func waitForHanded(_ count: UInt64) async -> Bool { await handed.wait(for: count, upTo: .seconds(30)) }

    /// Answers the oldest block waiting: taken (`nil`) or refused.
    func answerNext(_ refusal: ReplicationRefusal? = nil) {
        let next = waiting.withLock { $0.isEmpty ? nil : $0.removeFirst() }
        if let next {
            if refusal == nil { held.withLock { $0 = next.block.lastSeq } }
            next.answer(refusal)
        }
    }
}

@Suite(
    "Commit ahead: a leader's uncommitted suffix, answered when the cluster holds it, rolled back when not", .offThePool
)
struct CommitAheadTests {
    static let token = try! RegistrationToken("ahead-1:APA91b")

    static func request(_ id: String, _ operations: [LedgerOperation]) -> WriteRequest {
        WriteRequest(actor: "t", requestID: id, operations: operations)
    }

    static func subscribe(_ topic: String) -> LedgerOperation {
        .subscribe(token, try! TopicName(topic), via: .v1)
    }

    /// A ledger behind `gate` whose first batch (``token`` registered and subscribed to `news`, seqs 1–2) the
    /// cluster took.
    fileprivate static func leaderWithOneDevice(_ directory: TemporaryDirectory, gate: AheadGate) async throws -> Ledger
    {
        let leader = try openTestLedger(directory) { $0.replication = gate }
        let first = Task {
            try await leader.append(
                request("r", [.register(token, platform: nil, appID: nil), subscribe("news")]))
        }
        #expect(await gate.waitForHanded(1))
        gate.answerNext()
        _ = try await first.value
        return leader
    }

    @Test("a batch committed ahead is answered only once the cluster holds it; until then nothing names its seqs")
    func answeredOnAcknowledgement() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let gate = AheadGate()
        let leader = try openTestLedger(directory) { $0.replication = gate }
        defer { leader.close() }
        let answered = Mutex(false)
        let append = Task {
            defer { answered.withLock { $0 = true } }
            return try await leader.append(
                Self.request("r", [.register(Self.token, platform: nil, appID: nil), Self.subscribe("news")]))
        }
        #expect(await gate.waitForHanded(1))
        // LMDB holds the batch, and the writer is free for the next one…
        #expect(try leader.read { try $0.head().seq } == 2)
        #expect(try leader.read { try $0.clusterHeld() } == 0)
        // …but nobody was told: not the request, not a reader waiting for its seq, not the checkpoint's bound.
        try await Task.sleep(for: .milliseconds(50))
        #expect(answered.withLock { $0 } == false)
        #expect(leader.acknowledgedSeq == 0)
        #expect(await leader.waitForHead(2, upTo: .milliseconds(50)) == false)
        gate.answerNext()
        let receipt = try await append.value
        #expect(receipt.outcomes.compactMap(\.seq) == [1, 2])
        #expect(leader.acknowledgedSeq == 2)
        #expect(await leader.waitForHead(2, upTo: .seconds(5)))
        #expect(gate.replicated.withLock { $0 }.isEmpty)
    }

    @Test("a refused block's requests are told nothing was written, and the suffix rolls back to a sound ledger")
    func refusedSuffixRollsBack() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let gate = AheadGate()
        let leader = try await Self.leaderWithOneDevice(directory, gate: gate)
        // Two batches ahead of the cluster; it refuses the first, and with it the second.
        let refused = Task { try await leader.append(Self.request("s", [Self.subscribe("sport")])) }
        #expect(await gate.waitForHanded(2))
        let later = Task { try await leader.append(Self.request("w", [Self.subscribe("weather")])) }
        #expect(await gate.waitForHanded(3))
        let deposed = ReplicationRefusal(.notLeader, "deposed")
        gate.answerNext(deposed)
        gate.answerNext(deposed)
        await #expect(throws: StoreError.self) { try await refused.value }
        await #expect(throws: StoreError.self) { try await later.value }
        #expect(leader.acknowledgedSeq == 2)
        #expect(try leader.read { try $0.head().seq } == 4)
        // What the replica does once etcd says where the log ends: roll back to it, then write on.
        #expect(try leader.rollBack(after: 2) == 2)
        #expect(try leader.rollBack(after: 2) == 0)
        // It leads again from there (the real gate's lead begins at the head).
        let head = try leader.read { try $0.head() }
        gate.last.withLock { $0 = (head.seq, head.hash) }
        async let next = leader.append(Self.request("x", [Self.subscribe("tech")]))
        #expect(await gate.waitForHanded(4))
        gate.answerNext()
        #expect(try await next.outcomes.compactMap(\.seq) == [3])
        leader.close()
        let after = try openTestLedger(directory, mode: .readOnly)
        defer { after.close() }
        #expect(try after.read { try $0.head().seq } == 3)
        #expect(try after.read { try $0.clusterHeld() } == 2)
        let topics = try after.read { snapshot in
            try snapshot.topics(of: try #require(try snapshot.instanceID(of: Self.token))).map {
                try snapshot.topicName(of: $0)?.rawValue
            }
        }
        #expect(topics.compactMap { $0 }.sorted() == ["news", "tech"])
        let report = try after.verify(checkAudiences: true)
        #expect(report.isSound, "\(report.problems)")
    }

    @Test("a roll-back says it runs while it rebuilds the projections; a wait for it ends once they are whole")
    func rollBackCanBeWaitedFor() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let gate = AheadGate()
        let leader = try await Self.leaderWithOneDevice(directory, gate: gate)
        defer { leader.close() }
        let refused = Task { try await leader.append(Self.request("s", [Self.subscribe("sport")])) }
        #expect(await gate.waitForHanded(2))
        gate.answerNext(ReplicationRefusal(.notLeader, "deposed"))
        await #expect(throws: StoreError.self) { try await refused.value }
        #expect(await leader.waitForRollBack(upTo: .zero), "no roll-back runs yet")

        // The roll-back stops in the middle of its rebuild, on a thread of its own, until the test lets it go.
        let folding = Watermark()
        let release = DispatchSemaphore(value: 0)
        let rolling = Task {
            try await onThreadOfItsOwn {
                let paused = Mutex(false)
                return try leader.rollBack(after: 2) { _, _ in
                    let first = paused.withLock { paused in
                        defer { paused = true }
                        return !paused
                    }
                    guard first else { return }
                    folding.advance(to: 1)
                    release.wait()
                }
            }
        }
        #expect(await folding.wait(for: 1, upTo: .seconds(30)))
        #expect(leader.isRollingBack)
        // What a reader would be told meanwhile, and why the server waits instead.
        #expect {
            try leader.read { try $0.head() }
        } throws: { ($0 as? StoreError)?.code == .rebuildRequired }
        #expect(await leader.waitForRollBack(upTo: .milliseconds(50)) == false)
        let waiter = Task { await leader.waitForRollBack(upTo: .seconds(30)) }
        release.signal()
        #expect(await waiter.value)
        #expect(try await rolling.value == 1)
        #expect(!leader.isRollingBack)
        let topics = try leader.read { snapshot in
            try snapshot.topics(of: try #require(try snapshot.instanceID(of: Self.token))).map {
                try snapshot.topicName(of: $0)?.rawValue
            }
        }
        #expect(topics == ["news"])
    }

    @Test("a send rides in one block with its small audience: taken together, or refused and rolled back together")
    func sendAndAudienceInOneBlock() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let gate = AheadGate()
        let leader = try await Self.leaderWithOneDevice(directory, gate: gate)
        defer { leader.close() }
        let send = LedgerOperation.send(.topic(try TopicName("news")), precedence: .leftToRight, messageJSON: [])
        let sent = Task { try await leader.append(Self.request("s", [send])) }
        #expect(await gate.waitForHanded(2))
        let block = try #require(gate.waiting.withLock { $0.last?.block })
        #expect(block.firstSeq == 3 && block.records.count == 2, "the send and its audience, in one block")
        gate.answerNext()
        let receipt = try await sent.value
        guard case .sent(let seq, let messageID) = receipt.outcomes.first else {
            Issue.record("not sent: \(receipt)")
            return
        }
        #expect(seq == 3 && receipt.recordedAudiences == [messageID: 4])
        #expect(leader.acknowledgedSeq == 4)
        // The next send is refused: its audience goes with it.
        let refused = Task { try await leader.append(Self.request("t", [send])) }
        #expect(await gate.waitForHanded(3))
        gate.answerNext(ReplicationRefusal(.notLeader, "deposed"))
        await #expect(throws: StoreError.self) { try await refused.value }
        #expect(try leader.read { try $0.head().seq } == 6)
        #expect(try leader.rollBack(after: 4) == 2)
        #expect(try leader.read { try $0.head().seq } == 4)
        #expect(try leader.read { try $0.sendsWithoutAudience() }.isEmpty)
        leader.waitForAudiences()
        #expect(gate.handed.level == 3, "nothing more was written for the send: its audience came with it")
        let report = try leader.verify(checkAudiences: true)
        #expect(report.isSound, "\(report.problems)")
    }

    @Test("a ledger opened on its own forgets the mark: what it then holds is never rolled back")
    func standaloneForgetsTheMark() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        // A ledger's writer lock is let go when the ledger is released: each one lives in its own scope.
        func refuseOne() async throws {
            let gate = AheadGate()
            let ledger = try openTestLedger(directory) { $0.replication = gate }
            defer { ledger.close() }
            let refused = Task {
                try await ledger.append(Self.request("r", [.register(Self.token, platform: nil, appID: nil)]))
            }
            #expect(await gate.waitForHanded(1))
            gate.answerNext(ReplicationRefusal(.clusterUnavailable, "etcd"))
            await #expect(throws: StoreError.self) { try await refused.value }
            #expect(try ledger.read { try $0.clusterHeld() } == 0)
        }
        try await refuseOne()
        // An operator starts the node without its cluster: its suffix becomes what it answers for.
        try openTestLedger(directory).close()
        let rolling = try openTestLedger(directory) { $0.forRebuild = true }
        defer { rolling.close() }
        #expect(try rolling.read { try $0.clusterHeld() } == nil)
        #expect(throws: StoreError.self) { try rolling.rollBack(after: 0) }
        #expect(try rolling.read { try $0.head().seq } == 1)
    }

    @Test("an erasure waits for the cluster inside its transaction, even on a gate that commits ahead")
    func erasureIsNotAhead() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let gate = AheadGate()
        let leader = try openTestLedger(directory) { $0.replication = gate }
        defer { leader.close() }
        let registered = Task {
            try await leader.append(Self.request("r", [.register(Self.token, platform: nil, appID: nil)]))
        }
        #expect(await gate.waitForHanded(1))
        gate.answerNext()
        _ = try await registered.value
        _ = try await leader.append(Self.request("e", [.erase(Self.token, reason: "a user's request")]))
        #expect(gate.handed.level == 1)
        #expect(gate.replicated.withLock { $0.map(\.firstSeq) } == [2])
        #expect(leader.acknowledgedSeq == 2)
    }

    @Test(
        "a batch retried request by request hands each block over before the next is admitted; none is a failed commit"
    )
    func retriedBatchHandsOverInOrder() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let gate = AheadGate()
        // The batch's transaction fails at its first LMDB call, once; each request alone then commits.
        let armed = Mutex(false)
        var options = Ledger.Options()
        options.environment.faultInjector = LMDBFaultInjector { _, call in
            armed.withLock { armed in
                guard armed, call == 1 else { return nil }
                armed = false
                return .ioError
            }
        }
        let storage = try LedgerStorage.open(dataDirectory: directory.path, project: .default, options: options)
        armed.withLock { $0 = true }
        let tokens = try (0..<3).map { try RegistrationToken("retried-\($0):APA91b") }
        let batch = tokens.enumerated().map { index, token in
            Self.request("r\(index)", [.register(token, platform: nil, appID: nil)])
        }
        let handed = Mutex<[(UInt64, [Int])]>([])
        let commit = BatchCommit(
            environment: storage.environment, schema: storage.schema, limits: options.limits,
            moves: RecentMemberships.MoveCursor(), facts: WriterInstanceCache(),
            chainWorker: SerialWorker<BlockingJob, Void>(name: "test-chain"), gate: gate, logger: quietLogger)
        let committed = commit.run(batch, now: LedgerTime(microseconds: 1_800_000_000_000_000)) { block, requests in
            handed.withLock { $0.append((block.firstSeq, requests)) }
            gate.handOver(block) { _ in }
        }
        #expect(armed.withLock { $0 } == false)
        #expect(committed.results.allSatisfy { (try? $0.get()) != nil })
        #expect(handed.withLock { $0.map(\.0) } == [1, 2, 3])
        #expect(handed.withLock { $0.map(\.1) } == [[0], [1], [2]])
        #expect(committed.storageFailure == nil)
    }
}
