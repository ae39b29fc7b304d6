import Foundation
import LMDBKit
import LedgerCore

extension Ledger {
    /// Writes a consistent hot copy of this ledger to `<destination>/<project>/data.mdb`, compacted, while
    /// writers go on; the copy opens like any ledger (`--data destination`).
    ///
    /// The copy is written under a hidden temporary name beside the target, flushed to disk, and renamed into
    /// place only when whole: a backup that fails (a full disk) or is interrupted never takes the target's
    /// name, so a `<project>/data.mdb` in a backup directory is always a complete copy. (LMDB's copy itself
    /// does not sync.)
    ///
    /// - Throws: `.invalidArgument` when the destination already holds this project's ledger;
    ///   `.unavailable` when it cannot be written (nothing is left behind).
    public func backup(to destination: String) throws {
        let target = (destination as NSString).appendingPathComponent(project.rawValue)
        guard !FileManager.default.fileExists(atPath: target + "/data.mdb") else {
            throw StoreError(.invalidArgument, "\(target) already holds a ledger; choose an empty destination")
        }
        let partial = (destination as NSString).appendingPathComponent(
            ".\(project.rawValue).partial-\(UUID().uuidString)")
        do {
            try FileManager.default.createDirectory(
                atPath: partial, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            try environment.copy(to: partial)
            try syncPath(partial + "/data.mdb")
            try syncPath(partial)
            // rename(2) replaces a target that is an empty directory, and fails on one that holds anything.
            guard rename(partial, target) == 0 else {
                throw StoreError(
                    .unavailable, "cannot rename the finished copy into place: \(String(cString: strerror(errno)))")
            }
            try syncPath(destination)
        } catch {
            try? FileManager.default.removeItem(atPath: partial)
            throw StoreError(.unavailable, "cannot write the backup to \(target): \(error)")
        }
    }
}
