import LedgerCore
import LedgerQueries
import LedgerStore
import Synchronization

/// One project's checkpoint signer, signing at most once a second.
///
/// It signs on the checkpoints' worker (``CheckpointSigners/worker``), one checkpoint at a time: that is what
/// makes two requests that ask at once sign once, and what keeps `checkpoints.jsonl` in the order signed. The
/// root is computed in a read transaction that has ended before the note is appended to the file and synced, and
/// no lock is held across either: the lock below only publishes the last checkpoint signed.
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

    let keeper: CheckpointKeeper
    private let worker: SerialWorker<BlockingJob, Void>
    /// The last checkpoint signed.
    private let last = Mutex<Signed?>(nil)
    /// The size of the last checkpoint signed, raised after each: what ``waitForCheckpoint(covering:)`` waits on.
    private let signedSize = Watermark()

    /// - Parameter worker: the checkpoints' worker, where every signature of this project is made.
    init(keeper: CheckpointKeeper, worker: SerialWorker<BlockingJob, Void>) {
        self.keeper = keeper
        self.worker = worker
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
    /// and the lock), and remembers it as the last.
    private func keep(_ checkpoint: Checkpoint, at time: Double) throws -> SignedNote {
        let note = try SignedNote(parsing: try keeper.signAndKeep(checkpoint))
        last.withLock { $0 = Signed(note: note, at: time) }
        signedSize.advance(to: checkpoint.size)
        return note
    }
}
