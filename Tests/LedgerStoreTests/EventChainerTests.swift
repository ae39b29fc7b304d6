import Foundation
import LMDBKit
import LedgerCore
@testable import LedgerStore
import LedgerTestSupport
import Testing

/// A transaction of many events is encoded, chained and hashed on another thread (`EventChainer`), a small
/// one on the writer; both must store the same log, tree and head byte for byte.
@Suite("Event chainer")
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
            $0.isolation = isolation
            if fullMap {
                $0.environment.faultInjector = LMDBFaultInjector { _, call in
                    (call == 1_500 || call == 3_500) && firings.fire() ? .mapFull : nil
                }
            }
        }
        try await Self.append(operations, in: sizes, to: large)
        #expect(fullMap ? firings.count > 0 : firings.count == 0)
        let small = try openTestLedger(directory, project: try ProjectID("small"))
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
