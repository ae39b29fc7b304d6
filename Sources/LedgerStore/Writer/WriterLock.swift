#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// An exclusive advisory lock (`flock`) on `<ledger>/writer.lock`: one writing process per ledger.
///
/// The kernel releases it when the process dies, so a `kill -9` never leaves a ledger locked.
final class WriterLock: Sendable {
    private let descriptor: Int32

    /// Takes the lock without waiting.
    ///
    /// - Throws: `StoreError.locked` when another process holds it.
    init(directory: String) throws {
        let path = directory + "/writer.lock"
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            let code = errno
            throw StoreError(.unavailable, "cannot open \(path): \(String(cString: strerror(code)))")
        }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            close(fd)
            if code == EWOULDBLOCK {
                throw StoreError(
                    .locked,
                    "the ledger in \(directory) is open for writing by another process (a running `ledger serve`?);"
                        + " stop it and try again")
            }
            throw StoreError(.unavailable, "cannot lock \(path): \(String(cString: strerror(code)))")
        }
        self.descriptor = fd
    }

    deinit {
        flock(descriptor, LOCK_UN)
        close(descriptor)
    }
}
