import Foundation
import LedgerStore

/// A one-line secret key file (a checkpoint signer's, a witness's): made whole or not at all, mode 0600, and
/// refused when others can read it.
enum SecretKeyFile {
    /// Writes `text` and a newline to a temporary file beside `path`, syncs it, then links it to `path`: the key
    /// file appears whole or not at all, so a crash or a full disk midway never leaves a partial key that every
    /// later start refuses, and a process that finds the key made by another never reads it half-written.
    /// When two processes create it at once, the link of one fails with `EEXIST` and it loads the other's.
    static func create<Key>(_ path: String, text: String, parse: (String) -> Key?) throws -> Key {
        guard let key = parse(text) else { throw StoreError(.invalidArgument, "a new key does not parse") }
        let temporary = path + ".new-\(UUID().uuidString)"
        let fd = openFile(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw StoreError(.unavailable, "cannot create \(temporary): errno \(errno)") }
        defer { unlink(temporary) }
        do {
            defer { close(fd) }
            try writeDurably(fd, Array((text + "\n").utf8), path: temporary)
        }
        guard link(temporary, path) == 0 else {
            if errno == EEXIST { return try load(path, parse: parse, what: "a key") }
            throw StoreError(.unavailable, "cannot create \(path): errno \(errno)")
        }
        // The link is in place; making it durable is best effort (the key is whole either way).
        try? syncPath((path as NSString).deletingLastPathComponent)
        return key
    }

    /// The key in `path` (its one line, parsed).
    ///
    /// - Throws: `StoreError` `.invalidArgument` when others can read the file or it is not `what`.
    static func load<Key>(_ path: String, parse: (String) -> Key?, what: String) throws -> Key {
        if let problem = ConfiguredFile.problem(at: path, kind: .secret) {
            throw StoreError(.invalidArgument, problem)
        }
        var status = stat()
        guard stat(path, &status) == 0 else { throw StoreError(.unavailable, "cannot read \(path): errno \(errno)") }
        guard status.st_mode & 0o077 == 0 else {
            throw StoreError(
                .invalidArgument,
                "\(path) can be read by others (mode \(String(status.st_mode & 0o777, radix: 8))); `chmod 600` it")
        }
        guard let data = FileManager.default.contents(atPath: path),
            let text = String(data: data, encoding: .utf8)?.trimmingCharacters(in: .newlines),
            let key = parse(text)
        else { throw StoreError(.invalidArgument, "\(path) is not \(what)") }
        return key
    }
}

/// Writes all of `bytes` to `fd` and fsyncs it, or throws naming `path`.
func writeDurably(_ fd: Int32, _ bytes: [UInt8], path: String) throws {
    guard bytes.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) == bytes.count, fsync(fd) == 0 else {
        throw StoreError(.unavailable, "cannot write \(path): errno \(errno)")
    }
}

/// `open(2)` (a file-level name: inside ``CheckpointKeeper``, `open` is its own factory).
func openFile(_ path: String, _ flags: Int32, _ mode: mode_t) -> Int32 {
    open(path, flags, mode)
}
