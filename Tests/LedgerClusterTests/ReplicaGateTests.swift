import Dispatch
import LedgerCore
import LedgerStore
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
            group.addTask { for await job in jobs { job.complete(answer) } }
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
}
