#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The device and inode of a ledger's `data.mdb` when it was opened.
///
/// LMDB keeps writing into the file it mapped even after the file is deleted or replaced on disk: every
/// write would answer success into an unlinked file, and the next start would open an empty ledger — every
/// acknowledged write lost. The writer compares this identity with the path before each transaction and
/// stops writing the moment they differ.
struct DataFileIdentity: Equatable, Sendable {
    let device: UInt64
    let inode: UInt64

    /// The identity of the file at `path` now, or `nil` when there is none.
    init?(path: String) {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
    }

    /// Why the file at `path` is no longer this one, or `nil` when it still is.
    func problem(at path: String) -> String? {
        guard let now = DataFileIdentity(path: path) else {
            return "the ledger's data file was deleted while the server ran; writes are stopped"
        }
        guard now == self else {
            return "the ledger's data file was replaced while the server ran; writes are stopped"
        }
        return nil
    }
}

/// The identity of a writer's data file, adopted anew when the writer itself replaces the file (a compaction
/// after an erasure: ``LMDBEnvironment/compact()``).
final class DataFileWatch: Sendable {
    let path: String
    private let identity: LockedValue<DataFileIdentity?>

    init(path: String) {
        self.path = path
        identity = LockedValue(DataFileIdentity(path: path))
    }

    /// Why the file at `path` is no longer the one this writer maps, or `nil` when it still is.
    var problem: String? { identity.withLock { $0 }?.problem(at: path) }

    /// Takes the file now at `path` as this writer's (it has just replaced it).
    func adopt() { identity.withLock { $0 = DataFileIdentity(path: path) } }
}

/// Free space of the file system holding a path.
package enum FileSystemSpace {
    /// Bytes an unprivileged writer may still use on the file system of `path`, or `nil` if unknown.
    package static func availableBytes(at path: String) -> UInt64? {
        sizes(at: path)?.available
    }

    /// The bytes an unprivileged writer may still use on the file system of `path`, and its size, or `nil` if
    /// unknown. Products that would overflow (no file system is that large) saturate.
    package static func sizes(at path: String) -> (available: UInt64, size: UInt64)? {
        var info = statvfs()
        guard statvfs(path, &info) == 0 else { return nil }
        func bytes(_ blocks: UInt64) -> UInt64 {
            let (product, overflow) = blocks.multipliedReportingOverflow(by: UInt64(info.f_frsize))
            return overflow ? .max : product
        }
        return (bytes(UInt64(info.f_bavail)), bytes(UInt64(info.f_blocks)))
    }
}
