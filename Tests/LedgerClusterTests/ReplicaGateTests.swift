import Dispatch
import LedgerCore
import LedgerStore
import Synchronization
import Testing

@testable import LedgerCluster

/// The gate between a leader's writer and etcd, with the replica's side played by the test: each job the gate
/// hands over is answered as etcd would have answered it.
@Suite("ReplicaGate: what a leader's writer may commit")
struct ReplicaGateTests {
    /// A record as the log stores it: its chain hash (32 bytes), then an encoded event (any bytes here).
    static func record(_ byte: UInt8) -> [UInt8] { [UInt8](repeating: byte, count: HashChain.hashSize) + [1, 2, 3] }

    /// `gate.replicate(block)` on a thread of its own (it blocks its caller until the job is answered).
    static func replicate(_ block: ReplicatedBlock, through gate: ReplicaGate) async -> Result<Void, any Error> {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: Result { try gate.replicate(block) }) }
        }
    }

    /// Records an issue unless `result` is a refusal for `reason`.
    static func expectRefused(
        _ result: Result<Void, any Error>, _ reason: ReplicationRefusal.Reason,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        guard case .failure(let error as ReplicationRefusal) = result else {
            Issue.record("not refused: \(result)", sourceLocation: sourceLocation)
            return
        }
        #expect(error.reason == reason, sourceLocation: sourceLocation)
    }

    /// Leads at revision 7 from the empty log, answering every job with `answer`, while `body` runs.
    static func leading(
        answering answer: Result<Void, ReplicationRefusal>, _ body: (ReplicaGate) async throws -> Void
    ) async throws {
        let gate = ReplicaGate(project: "shop", waitLimit: .seconds(10))
        let jobs = gate.lead(revision: 7, tail: ReplicationTail(seq: 0, hash: HashChain.genesis))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { for await queued in jobs { for job in queued { job.complete(answer) } } }
            try await body(gate)
            gate.follow()  // ends the stream, and with it the answering task
            try await group.waitForAll()
        }
    }

    @Test("a change of role raises the routing watermark, so that waits on the route are told, not polled")
    func roleChangesAreAnnounced() async {
        let routing = Watermark()
        let gate = ReplicaGate(project: "shop", waitLimit: .seconds(1), routing: routing)
        let before = routing.level
        async let told = routing.wait(for: before + 1, upTo: .seconds(30))
        try? await Task.sleep(for: .milliseconds(20))
        _ = gate.lead(revision: 5, tail: ReplicationTail(seq: 0, hash: HashChain.genesis))
        let announced = await told
        #expect(announced && gate.isLeading)
        let leading = routing.level
        gate.follow()
        #expect(routing.level == leading + 1)
        gate.follow()  // following already: nothing changed, nothing announced
        #expect(routing.level == leading + 1)
        #expect(await routing.wait(for: leading + 2, upTo: .milliseconds(50)) == false)
    }

    @Test("a block extending the last one etcd took passes; one that does not is refused as a lost commit")
    func lostCommit() async throws {
        try await Self.leading(answering: .success(())) { gate in
            let first = ReplicatedBlock(firstSeq: 1, previousHash: HashChain.genesis, records: [Self.record(1)])
            try await Self.replicate(first, through: gate).get()
            let second = ReplicatedBlock(firstSeq: 2, previousHash: first.lastHash, records: [Self.record(2)])
            try await Self.replicate(second, through: gate).get()
            #expect(gate.takeLostCommit() == false)
            // The ledger did not commit `second` (its disk filled after etcd took it): its next block starts
            // where `first` ended again.
            let again = ReplicatedBlock(firstSeq: 2, previousHash: first.lastHash, records: [Self.record(3)])
            Self.expectRefused(await Self.replicate(again, through: gate), .staleTail)
            #expect(gate.isLeading == false)
            #expect(gate.takeLostCommit() == true)
            #expect(gate.takeLostCommit() == false)
        }
    }

    @Test("a block etcd refused closes the gate, and is not a lost commit")
    func refusedByEtcd() async throws {
        let deposed = ReplicationRefusal(.notLeader, "this node no longer leads project shop")
        try await Self.leading(answering: .failure(deposed)) { gate in
            let block = ReplicatedBlock(firstSeq: 1, previousHash: HashChain.genesis, records: [Self.record(1)])
            Self.expectRefused(await Self.replicate(block, through: gate), .notLeader)
            #expect(gate.isLeading == false)
            #expect(gate.takeLostCommit() == false)
        }
    }

    @Test("a block etcd does not answer within the wait limit is refused, and closes the gate")
    func etcdSilent() async throws {
        let gate = ReplicaGate(project: "shop", waitLimit: .milliseconds(100))
        let jobs = gate.lead(revision: 7, tail: ReplicationTail(seq: 0, hash: HashChain.genesis))
        try await withThrowingTaskGroup(of: Void.self) { group in
            // Takes each job and never answers it (etcd silent).
            group.addTask { for await _ in jobs {} }
            let block = ReplicatedBlock(firstSeq: 1, previousHash: HashChain.genesis, records: [Self.record(1)])
            Self.expectRefused(await Self.replicate(block, through: gate), .clusterUnavailable)
            #expect(gate.isLeading == false)
            #expect(gate.takeLostCommit() == false)
            gate.follow()
            try await group.waitForAll()
        }
    }

    /// `gate.admitAhead(block)` on a thread of its own (it may block while too many blocks are in flight).
    static func admit(_ block: ReplicatedBlock, through gate: ReplicaGate) async -> Result<UInt64, any Error> {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: Result { try gate.admitAhead(block) }) }
        }
    }

    /// A chain of `count` one-record blocks from the empty log.
    static func chain(_ count: Int) -> [ReplicatedBlock] {
        var blocks: [ReplicatedBlock] = []
        var previous = HashChain.genesis
        for index in 0..<count {
            let block = ReplicatedBlock(
                firstSeq: UInt64(index) + 1, previousHash: previous, records: [Self.record(UInt8(index + 1))])
            blocks.append(block)
            previous = block.lastHash
        }
        return blocks
    }

    @Test("ahead: blocks are handed over in order and taken together; the tail moves as etcd answers each")
    func aheadInOrder() async throws {
        let gate = ReplicaGate(project: "shop", waitLimit: .seconds(10), commitsAhead: true)
        let lead = gate.lead(revision: 7, tail: ReplicationTail(seq: 0, hash: HashChain.genesis))
        let acknowledged = Mutex<[UInt64]>([])
        for block in Self.chain(3) {
            #expect(try await Self.admit(block, through: gate).get() == 0)
            gate.handOver(block) { refusal in
                #expect(refusal == nil)
                acknowledged.withLock { $0.append(block.lastSeq) }
            }
        }
        var iterator = lead.makeAsyncIterator()
        let taken = try #require(await iterator.next())
        #expect(taken.map(\.block.firstSeq) == [1, 2, 3])
        #expect(taken.map(\.previousTail.seq) == [0, 1, 2])
        #expect(acknowledged.withLock { $0 }.isEmpty)
        for job in taken { job.complete(.success(())) }
        #expect(acknowledged.withLock { $0 } == [1, 2, 3])
        #expect(
            gate.currentRole == .leading(revision: 7, tail: ReplicationTail(seq: 3, hash: Self.chain(3)[2].lastHash)))
        // The next block is admitted with what etcd now holds.
        let fourth = ReplicatedBlock(firstSeq: 4, previousHash: Self.chain(3)[2].lastHash, records: [Self.record(9)])
        #expect(try await Self.admit(fourth, through: gate).get() == 3)
        gate.follow()
        #expect(await iterator.next() == nil)
    }

    @Test(
        "ahead: at most maximumInFlight blocks wait for etcd; the writer waits for a slot, or gives up and the gate closes"
    )
    func aheadBounded() async throws {
        // The limit is long beside the 50 ms the slot takes to free: a loaded machine (the whole suite on two
        // cores) must not make the first wait give up.
        let gate = ReplicaGate(project: "shop", waitLimit: .seconds(2), commitsAhead: true, maximumInFlight: 2)
        let lead = gate.lead(revision: 7, tail: ReplicationTail(seq: 0, hash: HashChain.genesis))
        let blocks = Self.chain(4)
        for block in blocks.prefix(2) {
            _ = try await Self.admit(block, through: gate).get()
            gate.handOver(block) { _ in }
        }
        var iterator = lead.makeAsyncIterator()
        let taken = try #require(await iterator.next())
        // A slot frees while the writer waits: it is admitted.
        async let third = Self.admit(blocks[2], through: gate)
        try await Task.sleep(for: .milliseconds(50))
        taken[0].complete(.success(()))
        #expect(try await third.get() == 1)
        gate.handOver(blocks[2]) { _ in }
        // None frees: the writer gives up within the limit, and the gate closes.
        Self.expectRefused(
            await Self.admit(blocks[3], through: gate).map { _ in () }, .clusterUnavailable)
        #expect(gate.isLeading == false)
        taken[1].complete(.success(()))
    }

    @Test("ahead: a refused block refuses every block after it, queued or not yet taken, and closes the gate")
    func aheadRefusalCascades() async throws {
        let gate = ReplicaGate(project: "shop", waitLimit: .seconds(10), commitsAhead: true)
        let lead = gate.lead(revision: 7, tail: ReplicationTail(seq: 0, hash: HashChain.genesis))
        let refusals = Mutex<[UInt64: ReplicationRefusal.Reason]>([:])
        let blocks = Self.chain(3)
        _ = try await Self.admit(blocks[0], through: gate).get()
        gate.handOver(blocks[0]) { refusal in refusals.withLock { $0[1] = refusal?.reason } }
        var iterator = lead.makeAsyncIterator()
        let taken = try #require(await iterator.next())
        for block in blocks.dropFirst() {
            _ = try await Self.admit(block, through: gate).get()
            gate.handOver(block) { refusal in refusals.withLock { $0[block.firstSeq] = refusal?.reason } }
        }
        taken[0].complete(.failure(ReplicationRefusal(.notLeader, "deposed")))
        #expect(refusals.withLock { $0 } == [1: .notLeader, 2: .notLeader, 3: .notLeader])
        #expect(gate.isLeading == false)
        #expect(await iterator.next() == nil)
    }

    @Test("ahead: a commit that failed in LMDB admits nothing more, lets the queue be written, then ends the lead")
    func aheadCommitFailed() async throws {
        let gate = ReplicaGate(project: "shop", waitLimit: .seconds(10), commitsAhead: true)
        let lead = gate.lead(revision: 7, tail: ReplicationTail(seq: 0, hash: HashChain.genesis))
        let blocks = Self.chain(2)
        _ = try await Self.admit(blocks[0], through: gate).get()
        let acknowledged = Mutex(false)
        gate.handOver(blocks[0]) { refusal in acknowledged.withLock { $0 = refusal == nil } }
        gate.commitFailed(StoreError(.unavailable, "the ledger's disk is full; nothing was written"))
        Self.expectRefused(await Self.admit(blocks[1], through: gate).map { _ in () }, .notLeader)
        var iterator = lead.makeAsyncIterator()
        let taken = try #require(await iterator.next())
        #expect(taken.map(\.block.firstSeq) == [1])
        taken[0].complete(.success(()))
        #expect(acknowledged.withLock { $0 })
        #expect(await iterator.next() == nil)
        #expect(gate.takeLostCommit())
    }
}
