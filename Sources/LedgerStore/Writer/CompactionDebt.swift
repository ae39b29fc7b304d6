import Synchronization

/// An erasure committed (or applied from the leader) whose compaction failed: until the file is compacted, its
/// freed pages may still hold what was erased. The writer compacts before its next transaction, and a
/// follower after its next applied block; meanwhile ``Ledger/compactionProblem`` says so to `/readyz`.
///
/// Shared by the ledger and its writer's thread; thread-safe.
final class CompactionDebt: Sendable {
    private let owed = Mutex<String?>(nil)

    /// Why the last compaction failed, while one is owed.
    var problem: String? { owed.withLock { $0 } }

    func owe(because error: any Error) { owed.withLock { $0 = "\(error)" } }

    func settle() { owed.withLock { $0 = nil } }
}
