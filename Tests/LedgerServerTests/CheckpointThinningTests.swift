import Foundation
import LedgerCore
import LedgerQueries
@testable import LedgerServer
import LedgerStore
import LedgerTestSupport
import Synchronization
import Testing

/// A clock a test moves: seconds since the Unix epoch.
final class FakeWallClock: Sendable {
    private let seconds: Mutex<Int64>

    init(_ start: Int64) { seconds = Mutex(start) }

    var now: Int64 { seconds.withLock { $0 } }

    func advance(by delta: Int64) { seconds.withLock { $0 += delta } }
}

/// The retention rule as docs/compliance.md states it, written from that text (not from ``CheckpointRetention``):
/// the times of `signed` (oldest first, after 1970) that the files keep at `now`.
func retainedByTheDocumentedRule(_ signed: [Int64], now: Int64) -> [Int64] {
    var lastOf: [String: Int] = [:]
    for (index, time) in signed.enumerated() {
        let hourBegan = time / 3_600 * 3_600
        let bucket =
            now - time < 3_600
            ? "every \(index)" : now - hourBegan < 30 * 86_400 ? "hour \(hourBegan)" : "day \(time / 86_400)"
        lastOf[bucket] = index
    }
    return lastOf.values.sorted().map { signed[$0] }
}

@Suite("The checkpoint files' thinning", .offThePool)
struct CheckpointThinningTests {
    struct KeptTime: Decodable {
        var size: UInt64
        var time: Int64?
    }

    func register(_ ledger: Ledger, _ name: String) async throws {
        _ = try await ledger.append(
            WriteRequest(
                actor: "test", requestID: name,
                operations: [.register(try RegistrationToken("device:\(name)"), platform: nil, appID: nil)]))
    }

    func keptLines(_ path: String) throws -> [KeptTime] {
        try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").map {
            try JSONDecoder().decode(KeptTime.self, from: Data($0.utf8))
        }
    }

    func inode(_ path: String) throws -> UInt64 {
        (try FileManager.default.attributesOfItem(atPath: path)[.systemFileNumber] as? NSNumber)?.uint64Value ?? 0
    }

    /// Over a simulated 32 days the file keeps every checkpoint of the last hour, the last of each hour for 30
    /// days and of each day before, rewritten at most every 10 minutes; every size ever signed still has its
    /// consistency proof, from the tree.
    @Test("over 32 simulated days: the rule, a rewrite at most every 10 minutes, and a proof from every size signed")
    func thinsByTheRule() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        let worker = SerialWorker<BlockingJob, Void>(name: "test-checkpoints")
        defer { worker.stop() }
        let clock = FakeWallClock(1_800_000_000)
        let keeper = try CheckpointKeeper.open(dataDirectory: directory.path, project: .default)
        let signer = CheckpointSigner(keeper: keeper, worker: worker, clock: { clock.now }, logger: quietLogger)
        let path = directory.path + "/demo-project/checkpoints.jsonl"
        var signed: [(checkpoint: Checkpoint, time: Int64)] = []
        func signNext(after seconds: Int64) async throws {
            clock.advance(by: seconds)
            try await register(ledger, "\(signed.count)")
            try await signer.signIfGrown(ledger)
            // The log has not grown since: the checkpoint just signed, answered again.
            signed.append((try await signer.latest(of: ledger).checkpoint, clock.now))
        }
        // 32 days, a checkpoint every 40 minutes (each is a thinning: the last was 40 minutes before).
        for _ in 0..<(32 * 36) { try await signNext(after: 2_400) }
        // Then an hour, one every 2 minutes: the file is rewritten at most once in 10 of them.
        var inodes: Set<UInt64> = [try inode(path)]
        for _ in 0..<30 {
            try await signNext(after: 120)
            inodes.insert(try inode(path))
        }
        #expect(inodes.count <= 1 + 30 * 120 / Int(CheckpointSigner.thinningInterval))
        // A last signature 10 minutes on: thinned at its time.
        try await signNext(after: CheckpointSigner.thinningInterval)

        let kept = try keptLines(path)
        let expected = retainedByTheDocumentedRule(signed.map(\.time), now: clock.now)
        #expect(kept.map(\.time) == expected)
        #expect(kept.last?.size == signed.last?.checkpoint.size)
        #expect(kept.count < 36 + 720 + 3)  // the last hour's, one an hour for 30 days, one a day before
        // Nothing an auditor needs is lost: a proof from each checkpoint ever signed to the head.
        let head = try #require(signed.last).checkpoint
        try ledger.read { snapshot in
            for (checkpoint, _) in signed {
                let proof = try LedgerProofs.consistencyProof(from: checkpoint.size, to: head.size, in: snapshot)
                #expect(proof.fromRoot == Data(checkpoint.root).base64EncodedString())
                #expect(
                    MerkleVerifier.verifyConsistency(
                        proof: proof.proof.map { Array(Data(base64Encoded: $0)!) }, oldSize: checkpoint.size,
                        newSize: head.size, oldRoot: checkpoint.root, newRoot: head.root))
            }
        }
        // The rewritten file is the project's alone, and nothing is left beside it.
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        #expect(!FileManager.default.fileExists(atPath: path + ".thinning"))
    }

    @Test("lines without a time count as signed with the next; a torn line is dropped; cosigned.jsonl alike")
    func linesWithoutTimes() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        let worker = SerialWorker<BlockingJob, Void>(name: "test-checkpoints")
        defer { worker.stop() }
        let start: Int64 = 1_800_000_000
        let clock = FakeWallClock(start)
        let keeper = try CheckpointKeeper.open(dataDirectory: directory.path, project: .default)
        let path = directory.path + "/demo-project/checkpoints.jsonl"
        let cosignedPath = directory.path + "/demo-project/cosigned.jsonl"
        // Two old lines without a time, then one a day old, three lines each an hour apart two days ago, and a
        // torn line.
        var text = #"{"note":"a","size":1}"# + "\n" + #"{"note":"b","size":2}"# + "\n"
        text += #"{"note":"c","size":3,"time":\#(start - 86_400 - 1_800)}"# + "\n"
        for hour in 0..<3 {
            text += #"{"note":"d","size":\#(4 + hour),"time":\#(start - 2 * 86_400 + Int64(hour) * 3_600)}"# + "\n"
        }
        try (text + #"{"note":"torn","si"#).write(toFile: path, atomically: false, encoding: .utf8)
        try text.write(toFile: cosignedPath, atomically: false, encoding: .utf8)
        let signer = CheckpointSigner(keeper: keeper, worker: worker, clock: { clock.now }, logger: quietLogger)
        try await register(ledger, "first")
        try await signer.signIfGrown(ledger)
        // "a" and "b" count as signed with "c", a day and a half ago: only the last of that hour, "c", is kept.
        #expect(try keptLines(path).map(\.size) == [3, 4, 5, 6, 1])
        #expect(try keptLines(cosignedPath).map(\.size) == [3, 4, 5, 6])
        #expect(try keeper.lastCosigned()?.size == 6)
        // 30 days on, the three lines two days old are in one day: its last is kept.
        clock.advance(by: 30 * 86_400)
        try await register(ledger, "second")
        try await signer.signIfGrown(ledger)
        #expect(try keptLines(path).map(\.size) == [3, 6, 1, 2])
        #expect(try keeper.kept().map(\.size) == [3, 6, 1, 2])
    }
}
