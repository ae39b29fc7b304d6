import Crypto
import Foundation
import LedgerCore
import LedgerQueries
@testable import LedgerServer
import LedgerStore
import LedgerTestSupport
import Testing

/// docs/performance.md's row "checkpoint files at constant load": one project's `checkpoints.jsonl` and
/// `cosigned.jsonl` (one witness) kept at one checkpoint a second on a simulated clock, thinned every 10 simulated
/// minutes as the server does (``CheckpointSigner/thinningInterval``), through the keeper's real appends (each
/// synced) and rewrites. A measurement of a few minutes, so run on demand:
///
///     TOPICLEDGER_MEASURE_CHECKPOINT_FILES=1 swift test --filter CheckpointFileGrowth
@Suite(
    "The checkpoint files' growth at constant load (a measurement)",
    .enabled(if: ProcessInfo.processInfo.environment["TOPICLEDGER_MEASURE_CHECKPOINT_FILES"] != nil), .offThePool)
struct CheckpointFileGrowthTests {
    @Test("a simulated 40 days, the last 25 hours at one checkpoint a second: bounded, growing by a line a day")
    func growth() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        try FileManager.default.createDirectory(
            atPath: directory.path + "/demo-project", withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700])
        let keeper = try CheckpointKeeper.open(dataDirectory: directory.path, project: .default)
        let witness = try Cosigner(name: "witness.example/w1", seed: [UInt8](repeating: 9, count: 32))
        let files = ["checkpoints.jsonl", "cosigned.jsonl"].map { directory.path + "/demo-project/" + $0 }
        func bytes() throws -> Int {
            try files.reduce(0) { $0 + ((try FileManager.default.attributesOfItem(atPath: $1)[.size] as? Int) ?? 0) }
        }
        let start: Int64 = 1_800_000_000
        var now = start
        var size: UInt64 = 0
        var thinnedAt: Int64?
        var largest = 0
        func keep(every seconds: Int64, until end: Int64) throws {
            while now + seconds <= end {
                now += seconds
                size += 5  // about 5 writes a second
                let root = Array(SHA256.hash(data: Array("\(size)".utf8)))
                let checkpoint = Checkpoint(origin: keeper.origin, size: size, root: root)
                let note = try SignedNote(parsing: try keeper.signAndKeep(checkpoint, at: now))
                try keeper.keepCosigned(
                    size: size, note: note.adding([try witness.cosign(note, time: UInt64(now))]).text, at: now)
                if thinnedAt.map({ now - $0 >= CheckpointSigner.thinningInterval }) ?? true {
                    largest = max(largest, try bytes())
                    thinnedAt = now
                    _ = try keeper.thin(by: CheckpointRetention(), now: now)
                }
            }
        }
        /// The files' size just after a thinning at `now` (between two, they hold up to 10 minutes more).
        func thinned() throws -> Int {
            thinnedAt = now
            _ = try keeper.thin(by: CheckpointRetention(), now: now)
            return try bytes()
        }
        let day: Int64 = 86_400
        try keep(every: 60, until: start + 38 * day + 23 * 3_600)
        try keep(every: 1, until: start + 39 * day)
        let atDay39 = try thinned()
        try keep(every: 1, until: start + 40 * day)
        let atDay40 = try thinned()
        let lines = try files.map { try String(contentsOfFile: $0, encoding: .utf8).split(separator: "\n").count }
        print(
            "checkpoint files at constant load: \(atDay39) bytes after 39 simulated days, \(atDay40) after 40, "
                + "each just after a thinning (growth \(atDay40 - atDay39) bytes a day); largest just before a "
                + "thinning \(largest); lines \(lines)")
        #expect(atDay40 - atDay39 <= 1 << 20)
        #expect(largest <= 4 << 20)
    }
}
