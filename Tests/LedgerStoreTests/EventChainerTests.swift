import Foundation
import LMDBKit
import LedgerCore
@testable import LedgerStore
import LedgerTestSupport
import Testing
import LedgerQueries

/// A transaction of many events is encoded, chained and hashed on another thread (`EventChainer`), a small
/// one on the writer; both must store the same log, tree and head byte for byte.
@Suite("Event chainer", .offThePool)
struct EventChainerTests {
    /// Operations whose outcomes do not depend on how they are batched: registrations, then subscriptions of
    /// registered tokens, at a fixed time and under one request id, so that their events are the same
    /// whichever transaction appends them.
    static func operations(_ count: Int) throws -> [LedgerOperation] {
        let tokens = try (0..<160).map { try RegistrationToken("device-\($0)") }
        var operations: [LedgerOperation] = tokens.map { .register($0, platform: nil, appID: nil) }
        var topic = 0
        while operations.count < count {
            let name = try TopicName("topic-\(topic)")
            operations += tokens.map { .subscribe($0, name, via: .iid) }
            topic += 1
        }
        return Array(operations.prefix(count))
    }

    static func append(_ operations: [LedgerOperation], in sizes: [Int], to ledger: Ledger) async throws {
        let time = LedgerTime(microseconds: 1_800_000_000_000_000)
        var rest = operations[...]
        for size in sizes where !rest.isEmpty {
            let request = WriteRequest(actor: "t", requestID: "same", time: time, operations: Array(rest.prefix(size)))
            let receipt = try await ledger.append(request)
            #expect(receipt.outcomes.allSatisfy { $0.seq != nil })
            rest = rest.dropFirst(size)
        }
        #expect(rest.isEmpty)
    }

    @Test(
        "requests of 1 to 1000 events, starting anywhere in a subtree of 256: the log, tree and head of one event per transaction",
        arguments: [Ledger.RequestIsolation.retryAlone, .nestedPerRequest], [false, true])
    func sameBytes(isolation: Ledger.RequestIsolation, fullMap: Bool) async throws {
        // Transactions that end before, at and after a subtree's last leaf; that hold one, two and many whole
        // subtrees; and that begin inside one and complete it.
        let sizes = [3, 300, 1, 255, 256, 700, 2, 513, 1000, 254, 768, 257, 1]
        let operations = try Self.operations(sizes.reduce(0, +))
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        // With `fullMap`, a few of the large transactions meet a full map midway — while their events are being
        // chained, or as their records are put — and run again from the start after the map grows: the first
        // run's chainer and records must leave nothing behind.
        let firings = Firings(limit: 4)
        let large = try openTestLedger(directory, project: try ProjectID("large")) {
            // Both ledgers seal under keys from one seed and the event's place: their logs are compared.
            $0.limits.sealKeys = SealKeySource(seed: 56)
            $0.isolation = isolation
            if fullMap {
                $0.environment.faultInjector = LMDBFaultInjector { _, call in
                    (call == 1_500 || call == 3_500) && firings.fire() ? .mapFull : nil
                }
            }
        }
        try await Self.append(operations, in: sizes, to: large)
        #expect(fullMap ? firings.count > 0 : firings.count == 0)
        let small = try openTestLedger(directory, project: try ProjectID("small")) {
            $0.limits.sealKeys = SealKeySource(seed: 56)
        }
        try await Self.append(operations, in: Array(repeating: 1, count: operations.count), to: small)
        #expect(try large.verify().isSound)
        #expect(try small.verify().isSound)
        #expect(try large.read { try $0.head() } == small.read { try $0.head() })
        let largeDirectory = large.directory
        let smallDirectory = small.directory
        large.close()
        small.close()
        // The head (seq, time, last chain hash) was compared above; `meta` also names the project.
        let databases = ["log", "merkle"]
        let largeDump = try rawDump(directory: largeDirectory, databases: databases)
        let smallDump = try rawDump(directory: smallDirectory, databases: databases)
        #expect(largeDump["log"]?.count == operations.count)
        #expect(largeDump["merkle"]?.count ?? 0 >= operations.count / 256)
        for name in databases {
            #expect(largeDump[name] == smallDump[name], "\(name) differs")
        }
    }
}

/// The chainer's worker and the caller share the chunks: what `finish` finds not yet begun it chains itself, after
/// the one the worker is in. Whoever chains which chunk, the output is the same.
@Suite("Event chainer: chunks shared with the caller", .offThePool)
struct EventChainerSharingTests {
    /// `count` subscription events from `firstSeq`, with tokens and topics of varying length.
    static func events(from firstSeq: UInt64, count: Int) throws -> [LedgerEvent] {
        try (0..<UInt64(count)).map { offset in
            let seq = firstSeq + offset
            return LedgerEvent(
                seq: seq, time: LedgerTime(microseconds: 1_800_000_000_000_000 + Int64(offset)), actor: "t",
                requestID: "r",
                body: .subscribed(
                    token: try RegistrationToken("device-\(seq)-" + String(repeating: "x", count: Int(seq % 7))),
                    topic: try TopicName("topic-\(seq % 13)"), via: .iid))
        }
    }

    /// The chain, its records and the complete subtrees of 256 leaves computed one event at a time, without
    /// the chainer: `HashChain` and RFC 6962's tree over the chain hashes (`InMemoryMerkleLeaves`).
    static func expected(_ events: [LedgerEvent], from hash: [UInt8]) throws
        -> (hash: [UInt8], records: [UInt8], ends: [Int], subtrees: [UInt64: [UInt8]])
    {
        var hash = hash
        var records: [UInt8] = []
        var ends: [Int] = []
        var leaves: [UInt64: [UInt8]] = [:]
        for event in events {
            HashChain.appendRecord(of: event, chainingFrom: &hash, to: &records)
            ends.append(records.count)
            leaves[event.seq] = MerkleHash.leaf(hash)
        }
        let width = MerkleStore.lowestStoredWidth
        var subtrees: [UInt64: [UInt8]] = [:]
        for event in events where event.seq % width == 0 {
            let span = (event.seq - width + 1)...event.seq
            guard let first = events.first, first.seq <= span.lowerBound else { continue }
            let tree = MerkleTree(size: width, source: InMemoryMerkleLeaves(leaves: span.map { leaves[$0]! }))
            subtrees[event.seq] = try tree.root()
        }
        return (hash, records, ends, subtrees)
    }

    enum Holdup: CaseIterable { case none, untilFinish, released }

    @Test(
        "the worker chains every chunk, the caller chains every one, or they share them: the same records, hash and subtrees",
        arguments: Holdup.allCases, [1, 200, 256, 257, 1_000])
    func shared(holdup: Holdup, firstSeq: UInt64) throws {
        let start = [UInt8](repeating: 7, count: 32)
        let events = try Self.events(from: firstSeq, count: 2_000)
        let expected = try Self.expected(events, from: start)
        for round in 0..<(holdup == .released ? 20 : 1) {
            let worker = SerialWorker<BlockingJob, Void>(name: "test-chain")
            defer { worker.stop() }
            let gate = DispatchSemaphore(value: 0)
            let held = DispatchSemaphore(value: 0)
            if holdup != .none {
                worker.enqueue {
                    held.signal()
                    gate.wait()
                }
                held.wait()  // the worker is in the gate, not waiting to take it
            }
            let chainer = EventChainer(chainingFrom: start, firstSeq: firstSeq, worker: worker)
            let chunks = stride(from: 0, to: events.count, by: 256).map {
                Array(events[$0..<min($0 + 256, events.count)])
            }
            for chunk in chunks { chainer.submit(chunk) }
            switch holdup {
            case .none: worker.waitUntilIdle()  // every chunk chained on the worker
            case .released:
                gate.signal()
                if round % 2 == 1 { usleep(UInt32(round * 50)) }
            case .untilFinish: break
            }
            // Held until finish: it takes the chunks back, then the gate opens and the job in hand ends.
            let output = chainer.finish(beforeWaiting: { if holdup == .untilFinish { gate.signal() } })
            // Released: the worker may have begun none, some or all of the chunks; only the output is checked.
            if holdup == .none { #expect(chainer.chunksChainedByCaller == 0) }
            if holdup == .untilFinish { #expect(chainer.chunksChainedByCaller == chunks.count) }
            worker.waitUntilIdle()  // the worker, if it was still to run a chunk, changes nothing after finish
            #expect(output.firstSeq == firstSeq)
            #expect(output.hash == expected.hash)
            #expect(output.records == expected.records)
            #expect(output.ends == expected.ends)
            #expect(
                Dictionary(uniqueKeysWithValues: output.subtrees.map { ($0.completedAt, $0.hash) }) == expected.subtrees
            )
        }
    }
}

/// Counts the faults an injector fires, up to a limit.
private final class Firings: @unchecked Sendable {
    // @unchecked: every access holds `lock`.
    private let lock = NSLock()
    private let limit: Int
    private var fired = 0

    init(limit: Int) { self.limit = limit }

    func fire() -> Bool {
        lock.withLock {
            guard fired < limit else { return false }
            fired += 1
            return true
        }
    }

    var count: Int { lock.withLock { fired } }
}
