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

    let keeper: CheckpointKeeper
    /// The last checkpoint signed; held while one is signed, so that two requests sign once.
    private let last = Mutex<Signed?>(nil)

    init(keeper: CheckpointKeeper) { self.keeper = keeper }

    /// The last signed checkpoint if it is under a second old or the log has not grown since; else a new one.
    /// One snapshot for the head and the signature; the head no further than what was acknowledged (a cluster's
    /// leader signs nothing etcd does not hold: ``Ledger/acknowledgedSeq``).
    func latest(of ledger: Ledger) throws -> (checkpoint: Checkpoint, note: String) {
        let now = monotonicSeconds()
        return try last.withLock { last in
            try ledger.read { snapshot in
                let head = min(try snapshot.head().seq, ledger.acknowledgedSeq)
                if let last, now - last.at < 1 || last.checkpoint.size == head {
                    return (last.checkpoint, last.note)
                }
                return try keepSigned(snapshot, size: head, at: now, as: &last)
            }
        }
    }

    /// Signs a checkpoint of the whole log unless the last one already covers it (or the log is empty).
    func signIfGrown(_ ledger: Ledger) throws {
        try last.withLock { last in
            try ledger.read { snapshot in
                let head = min(try snapshot.head().seq, ledger.acknowledgedSeq)
                guard head > 0, last?.checkpoint.size != head else { return }
                _ = try keepSigned(snapshot, size: head, at: monotonicSeconds(), as: &last)
            }
        }
    }

    /// Signs `snapshot`'s first `size` events and remembers it as the last.
    private func keepSigned(_ snapshot: LedgerSnapshot, size: UInt64, at time: Double, as last: inout Signed?) throws
        -> (checkpoint: Checkpoint, note: String)
    {
        let signed = try keeper.sign(snapshot, size: size)
        last = (signed.checkpoint, signed.note, time)
        return signed
    }
}
