import Foundation
import Synchronization

/// An erasure committed (or applied from the leader) whose compaction has not been made: until the file is
/// compacted, its freed pages may still hold what was erased. The writer compacts before its next transaction,
/// and a follower after its next applied block; meanwhile ``Ledger/compactionProblem`` says so to `/readyz`.
///
/// The debt outlives the process: a marker file, `<ledger>/compaction-owed`, is made (and synced) before each
/// compaction begins and removed only once one succeeds, so a compaction that failed — or that a kill, a crash
/// or a power cut interrupted — is owed again when a writer next opens the ledger, which makes it first.
///
/// Shared by the ledger and its writer's thread; thread-safe.
final class CompactionDebt: Sendable {
    static let markerName = "compaction-owed"

    private let owed: Mutex<String?>
    private let marker: String

    /// - Parameter directory: the ledger's directory; a marker left there by an earlier process is a debt now.
    init(directory: String) {
        marker = directory + "/" + Self.markerName
        owed = Mutex(
            FileManager.default.fileExists(atPath: marker)
                ? "an erasure's compaction did not finish before the ledger was last closed" : nil)
    }

    /// Why the last compaction failed, while one is owed.
    var problem: String? { owed.withLock { $0 } }

    /// Before a compaction: the marker, made and synced, so that an interrupted compaction is owed at the next open.
    func begin() throws {
        let descriptor = open(marker, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw StoreError(.unavailable, "cannot create \(marker): \(String(cString: strerror(errno)))")
        }
        let synced = fsync(descriptor) == 0
        close(descriptor)
        guard synced else {
            throw StoreError(.unavailable, "cannot sync \(marker): \(String(cString: strerror(errno)))")
        }
        try syncPath((marker as NSString).deletingLastPathComponent)
    }

    func owe(because error: any Error) { owed.withLock { $0 = "\(error)" } }

    /// After a compaction that succeeded: the marker removed, nothing owed.
    func settle() {
        unlink(marker)
        try? syncPath((marker as NSString).deletingLastPathComponent)
        owed.withLock { $0 = nil }
    }
}
