import LedgerCore
import LedgerQueries
import LedgerStore
import Logging
import Synchronization

/// One project's checkpoint signer, signing at most once a second.
///
/// It signs on the checkpoints' worker (``CheckpointSigners/worker``), one checkpoint at a time: that is what
/// makes two requests that ask at once sign once, and what keeps `checkpoints.jsonl` in the order signed. The
/// root is computed in a read transaction that has ended before the note is appended to the file and synced, and
/// no lock is held across either: the lock below only publishes the last checkpoint signed.
///
/// After a signature, at most once a ``thinningInterval`` of its clock, it thins the project's checkpoint files
/// by ``CheckpointRetention`` (``CheckpointKeeper/thin(by:now:)``), on the same worker and outside any lock, so
/// that they stay bounded under constant writes.
///
/// - Note: Thread-safe.
final class CheckpointSigner: Sendable {
    private struct Signed {
        var note: SignedNote
        /// When it was signed (``monotonicSeconds()``).
        var at: Double
    }

    /// At most one checkpoint is signed in this many seconds (the last is answered again within it).
    static let interval = 1.0
    /// The files are thinned at most once in this many seconds: a rewrite of about a megabyte, not one per append.
    static let thinningInterval: Int64 = 600

    let keeper: CheckpointKeeper
    private let worker: SerialWorker<BlockingJob, Void>
    /// The last checkpoint signed.
    private let last = Mutex<Signed?>(nil)
    /// The size of the last checkpoint signed, raised after each: what ``waitForCheckpoint(covering:)`` waits on.
    private let signedSize = Watermark()
    private let retention: CheckpointRetention
    /// Seconds since the Unix epoch: the time kept with each checkpoint, and what the files are thinned by.
    private let clock: @Sendable () -> Int64
    /// When the files were last thinned (``clock``), nil before the first signature.
    private let thinnedAt = Mutex<Int64?>(nil)
    private let logger: Logger

    /// - Parameter worker: the checkpoints' worker, where every signature of this project is made.
    /// - Parameter clock: seconds since the Unix epoch (a test's, to age the files).
    init(
        keeper: CheckpointKeeper, worker: SerialWorker<BlockingJob, Void>,
        retention: CheckpointRetention = CheckpointRetention(),
        clock: @escaping @Sendable () -> Int64 = CheckpointKeeper.wallClock, logger: Logger
    ) {
        self.keeper = keeper
        self.worker = worker
        self.retention = retention
        self.clock = clock
        self.logger = logger
    }

    /// The last signed checkpoint if it is under a second old or the log has not grown since; else a new one,
    /// kept before it is returned. The head no further than what was acknowledged (a cluster's leader signs
    /// nothing etcd does not hold: ``Ledger/acknowledgedSeq``).
    ///
    /// - Throws: `StoreError` (the ledger, or the kept file), `NoteError`.
    func latest(of ledger: Ledger) async throws -> SignedNote {
        try await worker.perform { [self] in
            let now = monotonicSeconds()
            let last = last.withLock { $0 }
            let next = try ledger.read { snapshot -> Next in
                let head = min(try snapshot.head().seq, ledger.acknowledgedSeq)
                if let last, now - last.at < Self.interval || last.note.checkpoint.size == head {
                    return .answerAgain(last.note)
                }
                return .sign(try keeper.checkpoint(of: snapshot, size: head))
            }
            switch next {
            case .answerAgain(let note): return note
            case .sign(let checkpoint): return try keep(checkpoint, at: now)
            }
        }
    }

    /// What ``latest(of:)`` decided in its read transaction, to do after it.
    private enum Next {
        case answerAgain(SignedNote)
        case sign(Checkpoint)
    }

    /// Signs a checkpoint of the whole log unless the last one already covers it (or the log is empty).
    ///
    /// - Throws: `StoreError`, `NoteError`.
    func signIfGrown(_ ledger: Ledger) async throws {
        try await worker.perform { [self] in
            let covered = last.withLock { $0?.note.checkpoint.size }
            let next = try ledger.read { snapshot -> Checkpoint? in
                let head = min(try snapshot.head().seq, ledger.acknowledgedSeq)
                guard head > 0, covered != head else { return nil }
                return try keeper.checkpoint(of: snapshot, size: head)
            }
            if let next { _ = try keep(next, at: monotonicSeconds()) }
        }
    }

    /// Returns once a checkpoint covering `size` events has been signed, or when the signer may sign again (the
    /// rest of its second), whichever is first: then ``latest(of:)`` covers `size` whoever signs it.
    func waitForCheckpoint(covering size: UInt64) async {
        let signedAt = last.withLock { $0?.at } ?? -Self.interval
        let rest = max(0, signedAt + Self.interval - monotonicSeconds())
        _ = await signedSize.wait(for: size, upTo: .milliseconds(Int64((rest * 1000).rounded(.up))))
    }

    /// Signs `checkpoint`, appends it to the kept file and syncs it (on the worker, outside the read transaction
    /// and the lock), and remembers it as the last; then thins the files if they are due.
    private func keep(_ checkpoint: Checkpoint, at time: Double) throws -> SignedNote {
        let now = clock()
        let note = try SignedNote(parsing: try keeper.signAndKeep(checkpoint, at: now))
        last.withLock { $0 = Signed(note: note, at: time) }
        signedSize.advance(to: checkpoint.size)
        thinIfDue(now: now)
        return note
    }

    /// Thins the checkpoint files when the last thinning is ``thinningInterval`` old (or there was none). A failure
    /// is logged (it names the file, never a key or a note's content) and tried again at the next interval: the
    /// checkpoint is already kept, and signing goes on.
    private func thinIfDue(now: Int64) {
        let due = thinnedAt.withLock { thinnedAt in
            guard thinnedAt.map({ now - $0 >= Self.thinningInterval || now < $0 }) ?? true else { return false }
            thinnedAt = now
            return true
        }
        guard due else { return }
        do {
            _ = try keeper.thin(by: retention, now: now)
        } catch {
            logger.warning(
                "could not thin the project's checkpoint files; they grow until a later try succeeds",
                metadata: ["ledger.origin": "\(keeper.origin)", "error": "\(error)"])
        }
    }
}
