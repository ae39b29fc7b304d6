import Foundation

/// `fsync(2)` of the file or directory at `path` — a directory to make a rename or link in it durable — or
/// throws naming it. Shared by the backup (its copy, then its directory) and the checkpoint key (its
/// directory, after the link).
package func syncPath(_ path: String) throws {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { throw StoreError(.unavailable, "cannot open \(path): \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    guard fsync(fd) == 0 else {
        throw StoreError(.unavailable, "cannot sync \(path): \(String(cString: strerror(errno)))")
    }
}
