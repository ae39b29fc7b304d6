import Foundation
import Synchronization
import Hummingbird
import LedgerCore
import LedgerStore
import FCMWire
import LedgerQueries

/// One project's checkpoint signer, signing at most once a second.
final class CheckpointSigner: Sendable {
    private typealias Signed = (checkpoint: Checkpoint, note: String, at: Double)

    private let keeper: CheckpointKeeper
    /// The last checkpoint signed; held while one is signed, so that two requests sign once.
    private let last = Mutex<Signed?>(nil)

    init(keeper: CheckpointKeeper) { self.keeper = keeper }

    /// The last signed checkpoint if it is under a second old or the log has not grown since; else a new one.
    /// One snapshot for the head and the signature.
    func latest(of ledger: Ledger) throws -> (checkpoint: Checkpoint, note: String) {
        let now = monotonicSeconds()
        return try last.withLock { last in
            try ledger.read { snapshot in
                let head = try snapshot.head().seq
                if let last, now - last.at < 1 || last.checkpoint.size == head {
                    return (last.checkpoint, last.note)
                }
                return try keepSigned(snapshot, at: now, as: &last)
            }
        }
    }

    /// Signs a checkpoint of the whole log unless the last one already covers it (or the log is empty).
    func signIfGrown(_ ledger: Ledger) throws {
        try last.withLock { last in
            try ledger.read { snapshot in
                let head = try snapshot.head().seq
                guard head > 0, last?.checkpoint.size != head else { return }
                _ = try keepSigned(snapshot, at: monotonicSeconds(), as: &last)
            }
        }
    }

    /// Signs `snapshot`'s whole log and remembers it as the last.
    private func keepSigned(_ snapshot: LedgerSnapshot, at time: Double, as last: inout Signed?) throws -> (
        checkpoint: Checkpoint, note: String
    ) {
        let signed = try keeper.sign(snapshot)
        last = (signed.checkpoint, signed.note, time)
        return signed
    }
}
