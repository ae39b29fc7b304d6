import LedgerStore
import Crypto
import Foundation
import LedgerCore

/// A project's checkpoint signer and the checkpoints it has signed, beside its ledger:
///
/// - `<data>/<project>/checkpoint.key`: the Ed25519 signing key, created on first use with mode 0600, in Go's
///   `note` signer-key format `PRIVATE+KEY+<name>+<key hash>+<base64(0x01 ‖ 32-byte seed)>`. A key file that
///   others can read is refused. Never logged, never printed.
/// - `<data>/<project>/checkpoints.jsonl`: the checkpoints signed, one JSON object a line
///   (`{"note":"…","size":N,"time":T}`, T in seconds since the Unix epoch), appended under an exclusive lock.
/// - `<data>/<project>/cosigned.jsonl`: with witnesses configured, each checkpoint that reached the quorum, with
///   its cosignature lines, in the same format — the server serves the last one.
///
/// Both stay bounded: the server thins them by ``CheckpointRetention`` (``thin(by:now:)``). What a proof comes
/// from is the Merkle tree, which keeps every event, not these files.
///
/// Origin and key name are `topicledger/<project>` unless configured (``CheckpointSettings``).
public struct CheckpointKeeper: Sendable {
    public let signer: NoteSigner
    public let origin: String
    let keptPath: String
    let cosignedPath: String

    public static func defaultName(for project: ProjectID) -> String { "topicledger/\(project)" }

    /// Loads the project's key (`settings.keyFile`, or `<data>/<project>/checkpoint.key`), creating it when
    /// `create` and absent.
    ///
    /// - Throws: `StoreError` `.notFound` (no key and not `create`), `.invalidArgument` (a key file others can
    ///   read, one that is not a signer key, or one whose name is not the configured key name).
    public static func open(
        dataDirectory: String, project: ProjectID, settings: CheckpointSettings = CheckpointSettings(),
        create: Bool = true
    ) throws -> CheckpointKeeper {
        let directory = (dataDirectory as NSString).appendingPathComponent(project.rawValue)
        let keyPath = settings.keyFile ?? (directory as NSString).appendingPathComponent("checkpoint.key")
        let name = settings.keyName ?? defaultName(for: project)
        let signer: NoteSigner
        if FileManager.default.fileExists(atPath: keyPath) {
            signer = try loadKey(keyPath)
            // A key keeps the name it was made with: its key hash covers the name.
            guard signer.name == name else {
                throw StoreError(
                    .invalidArgument,
                    "the checkpoint key \(keyPath) is named \(signer.name), not \(name) as configured; "
                        + "configure keyName \(signer.name), or give a new keyFile for a key named \(name)")
            }
        } else {
            guard create else {
                throw StoreError(
                    .notFound, "project \(project) has no checkpoint key yet (`ledger checkpoint` makes one)")
            }
            signer = try createKey(keyPath, name: name)
        }
        return CheckpointKeeper(
            signer: signer, origin: settings.origin ?? defaultName(for: project),
            keptPath: (directory as NSString).appendingPathComponent("checkpoints.jsonl"),
            cosignedPath: (directory as NSString).appendingPathComponent("cosigned.jsonl"))
    }

    /// Signs a checkpoint of `snapshot`'s log — the whole log, or its first `size` events — and keeps it.
    public func sign(_ snapshot: LedgerSnapshot, size: UInt64? = nil) throws -> (checkpoint: Checkpoint, note: String) {
        let checkpoint = try self.checkpoint(of: snapshot, size: size)
        return (checkpoint, try signAndKeep(checkpoint))
    }

    /// The checkpoint (unsigned) of `snapshot`'s log — the whole log, or its first `size` events: reads only, so
    /// that a caller can end its read transaction before ``signAndKeep(_:)`` writes.
    public func checkpoint(of snapshot: LedgerSnapshot, size: UInt64? = nil) throws -> Checkpoint {
        let tree = try snapshot.merkleTree(size: size)
        return Checkpoint(origin: origin, size: tree.size, root: try tree.root())
    }

    /// Signs `checkpoint` and keeps its note (appended to `checkpoints.jsonl` and synced: durable when it
    /// returns); the note.
    ///
    /// - Parameter time: when it is signed, in seconds since the Unix epoch (what ``thin(by:now:)`` ages it by).
    /// - Note: File I/O and an `fsync`: for a worker's thread, outside any lock and any transaction.
    public func signAndKeep(_ checkpoint: Checkpoint, at time: Int64 = CheckpointKeeper.wallClock()) throws -> String {
        let note = try signer.sign(checkpoint)
        try Self.keep(KeptLine(note: note, size: checkpoint.size, time: time), in: keptPath)
        return note
    }

    /// Keeps a checkpoint with the cosignatures of its witnesses' quorum (durable when it returns).
    ///
    /// - Parameter time: when it is kept, in seconds since the Unix epoch.
    public func keepCosigned(size: UInt64, note: String, at time: Int64 = CheckpointKeeper.wallClock()) throws {
        try Self.keep(KeptLine(note: note, size: size, time: time), in: cosignedPath)
    }

    /// The seconds since the Unix epoch now: the time recorded with each kept checkpoint.
    public static func wallClock() -> Int64 { Int64(time(nil)) }

    /// What ``thin(by:now:)`` did to one file.
    public struct Thinning: Sendable, Equatable {
        public var keptLines: Int
        public var droppedLines: Int
        /// The file's size afterwards.
        public var bytes: Int
    }

    /// Drops from `checkpoints.jsonl` and `cosigned.jsonl` the lines `retention` no longer keeps at `now`.
    ///
    /// Each file that loses a line is rewritten whole under its lock: a temporary file beside it written and
    /// synced, renamed over it, and the directory synced. A reader sees the old file or the new one, never a mix;
    /// an append from another process (`ledger checkpoint`) waits for the lock and then appends to the new file.
    /// A last line cut short by a crash is dropped as well.
    ///
    /// - Returns: what it did to each file; nil for a file that does not exist.
    /// - Throws: `StoreError` `.corrupt` for a file with a line that is not a kept checkpoint (it is left as it
    ///   is), `.unavailable` for an I/O error.
    /// - Note: File I/O and `fsync`s: for a worker's thread, outside any lock and any transaction. The server calls
    ///   it at most once every few minutes, not at each append.
    public func thin(by retention: CheckpointRetention, now: Int64) throws -> (
        checkpoints: Thinning?, cosigned: Thinning?
    ) {
        (try Self.thin(keptPath, by: retention, now: now), try Self.thin(cosignedPath, by: retention, now: now))
    }

    /// The cosigned checkpoints kept so far, oldest first (see ``kept()``).
    public func cosigned() throws -> [(size: UInt64, note: String)] { try Self.kept(in: cosignedPath) }

    /// The last cosigned checkpoint kept, read from the file's end (it grows by a line a second while the log
    /// does), nil when there is none.
    public func lastCosigned() throws -> (size: UInt64, note: String)? {
        guard let handle = FileHandle(forReadingAtPath: cosignedPath) else { return nil }
        defer { try? handle.close() }
        let end = try handle.seekToEnd()
        // A cosigned note is a few hundred bytes a signature; 1 MiB holds a whole last line with room to spare.
        let start = end > 1 << 20 ? end - (1 << 20) : 0
        try handle.seek(toOffset: start)
        var data = try handle.readToEnd() ?? Data()
        if start > 0, let firstNewline = data.firstIndex(of: UInt8(ascii: "\n")) {
            data = data[data.index(after: firstNewline)...]
        }
        return try Self.lines(of: data, path: cosignedPath).last
    }

    /// The checkpoints kept so far, oldest first.
    ///
    /// A last line without its newline is a write that a crash or a full disk cut short: its checkpoint was
    /// never handed out (``sign(_:)`` returns only after the whole line is on disk), so it is not one of them.
    /// Any other line that is not a kept checkpoint is `.corrupt`.
    public func kept() throws -> [(size: UInt64, note: String)] { try Self.kept(in: keptPath) }

    private static func kept(in keptPath: String) throws -> [(size: UInt64, note: String)] {
        guard let data = FileManager.default.contents(atPath: keptPath) else { return [] }
        return try lines(of: data, path: keptPath)
    }

    /// The kept checkpoints of `data`, whole lines of the file at `keptPath` (a last line without its newline
    /// left out).
    private static func lines(of data: Data, path keptPath: String) throws -> [(size: UInt64, note: String)] {
        try entries(of: data, path: keptPath).map { ($0.line.size, $0.line.note) }
    }

    /// One whole line of a kept checkpoints' file: where it is in the file's bytes (with its newline), and what
    /// it says.
    private struct Entry {
        var range: Range<Data.Index>
        var line: KeptLine
    }

    /// The whole lines of `data` (a last line without its newline left out, empty lines skipped).
    ///
    /// - Throws: `StoreError` `.corrupt` for a line that is not a kept checkpoint.
    private static func entries(of data: Data, path keptPath: String) throws -> [Entry] {
        let decoder = JSONDecoder()
        var entries: [Entry] = []
        var start = data.startIndex
        while let newline = data[start...].firstIndex(of: UInt8(ascii: "\n")) {
            if newline > start {
                guard let line = try? decoder.decode(KeptLine.self, from: Data(data[start..<newline])) else {
                    throw StoreError(.corrupt, "\(keptPath) holds a line that is not a kept checkpoint")
                }
                entries.append(Entry(range: start..<(newline + 1), line: line))
            }
            start = newline + 1
        }
        return entries
    }

    /// One line of the kept checkpoints' file: `{"note":…,"size":…,"time":…}`. Lines written before times were
    /// recorded have none.
    private struct KeptLine: Codable {
        var note: String
        var size: UInt64
        /// When it was kept, in seconds since the Unix epoch.
        var time: Int64?
    }

    private static func keep(_ kept: KeptLine, in keptPath: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        var line = try encoder.encode(kept)
        line.append(UInt8(ascii: "\n"))
        let fd = try openLocked(keptPath, create: true)!
        defer { close(fd) }
        try dropTornTail(fd, path: keptPath)
        try writeDurably(fd, Array(line), path: keptPath)
    }

    /// The file at `path` opened to append and locked exclusively, once the file opened is still the one at the
    /// path: a thinning renames a new file over it, and an append that waited for the lock of the old one opens
    /// the new one instead. Nil when there is no file and not `create`.
    private static func openLocked(_ path: String, create: Bool) throws -> Int32? {
        while true {
            let fd = openFile(path, O_RDWR | O_APPEND | O_CLOEXEC | (create ? O_CREAT : 0), 0o600)
            guard fd >= 0 else {
                let error = errno
                if error == ENOENT, !create { return nil }
                throw StoreError(.unavailable, "cannot open \(path): errno \(error)")
            }
            guard flock(fd, LOCK_EX) == 0 else {
                let error = errno
                close(fd)
                throw StoreError(.unavailable, "cannot lock \(path): errno \(error)")
            }
            var opened = stat()
            var named = stat()
            if fstat(fd, &opened) == 0, stat(path, &named) == 0, opened.st_ino == named.st_ino,
                opened.st_dev == named.st_dev
            {
                return fd
            }
            close(fd)
        }
    }

    private static func thin(_ path: String, by retention: CheckpointRetention, now: Int64) throws -> Thinning? {
        guard let fd = try openLocked(path, create: false) else { return nil }
        defer { close(fd) }
        let data = try readAll(fd, path: path)
        let entries = try entries(of: data, path: path)
        let keep = retention.kept(times: entries.map(\.line.time), now: now)
        var kept = [UInt8]()
        kept.reserveCapacity(data.count)
        for index in keep { kept.append(contentsOf: data[entries[index].range]) }
        let thinning = Thinning(keptLines: keep.count, droppedLines: entries.count - keep.count, bytes: kept.count)
        guard kept.count != data.count else { return thinning }
        let temporary = path + ".thinning"
        let out = openFile(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard out >= 0 else { throw StoreError(.unavailable, "cannot write \(temporary): errno \(errno)") }
        do {
            try writeDurably(out, kept, path: temporary)
            close(out)
        } catch {
            close(out)
            unlink(temporary)
            throw error
        }
        guard rename(temporary, path) == 0 else {
            let error = errno
            unlink(temporary)
            throw StoreError(.unavailable, "cannot rename \(temporary) to \(path): errno \(error)")
        }
        try syncDirectory(of: path)
        return thinning
    }

    /// All of the file `fd` (at `path`) holds.
    private static func readAll(_ fd: Int32, path: String) throws -> Data {
        var status = stat()
        guard fstat(fd, &status) == 0 else { throw StoreError(.unavailable, "cannot read \(path): errno \(errno)") }
        var bytes = [UInt8](repeating: 0, count: Int(status.st_size))
        var done = 0
        while done < bytes.count {
            let count = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + done, $0.count - done, off_t(done)) }
            guard count > 0 else { throw StoreError(.unavailable, "cannot read \(path): errno \(errno)") }
            done += count
        }
        return Data(bytes)
    }

    /// Syncs the directory that holds `path`, so that a rename into it is durable.
    private static func syncDirectory(of path: String) throws {
        let directory = (path as NSString).deletingLastPathComponent
        let fd = openFile(directory.isEmpty ? "." : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0)
        guard fd >= 0 else { throw StoreError(.unavailable, "cannot open \(directory): errno \(errno)") }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw StoreError(.unavailable, "cannot sync \(directory): errno \(errno)") }
    }

    private static func createKey(_ path: String, name: String) throws -> NoteSigner {
        let signer = try NoteSigner(name: name, key: Curve25519.Signing.PrivateKey())
        return try SecretKeyFile.create(path, text: signer.signerKeyLine, parse: NoteSigner.init(signerKeyLine:))
    }

    private static func loadKey(_ path: String) throws -> NoteSigner {
        try SecretKeyFile.load(path, parse: NoteSigner.init(signerKeyLine:), what: "a checkpoint signing key")
    }
}

/// How a project's checkpoints are signed, when not the defaults (the config file's
/// `projects.<p>.checkpoint`: docs/server.md).
public struct CheckpointSettings: Sendable, Equatable {
    /// The checkpoint's first line (default `topicledger/<project>`).
    public var origin: String?
    /// The signing key's name (default `topicledger/<project>`); a key file made earlier keeps its own name.
    public var keyName: String?
    /// Where the signing key is (default `<data>/<project>/checkpoint.key`); made there on first use, mode 0600.
    public var keyFile: String?

    public init(origin: String? = nil, keyName: String? = nil, keyFile: String? = nil) throws(StoreError) {
        if let origin {
            // C2SP tlog-checkpoint: the origin is one non-empty line of printable text.
            guard !origin.isEmpty, origin.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7F }) else {
                throw StoreError(.invalidArgument, "a checkpoint origin is one non-empty line of printable text")
            }
        }
        if let keyName, !NoteVerifier.isValidName(keyName) {
            throw StoreError(.invalidArgument, "a checkpoint key name is non-empty, without spaces or +")
        }
        if let keyFile, keyFile.isEmpty || keyFile.contains("\0") {
            throw StoreError(.invalidArgument, "a checkpoint key file is a path")
        }
        self.origin = origin
        self.keyName = keyName
        self.keyFile = keyFile
    }

    public init() {}
}

/// Cuts the file back to its last newline when a write was cut short (a crash, a full disk), so the next line
/// starts on a line of its own instead of being glued to the fragment. The caller holds the file's lock.
private func dropTornTail(_ fd: Int32, path: String) throws {
    let size = lseek(fd, 0, SEEK_END)
    guard size > 0 else { return }
    var end = size
    var byte: UInt8 = 0
    guard pread(fd, &byte, 1, end - 1) == 1 else {
        throw StoreError(.unavailable, "cannot read \(path): errno \(errno)")
    }
    guard byte != UInt8(ascii: "\n") else { return }
    // Back to just after the last newline (or to the start), a chunk at a time.
    var chunk = [UInt8](repeating: 0, count: 4096)
    var keep: off_t = 0
    search: while end > 0 {
        let start = max(0, end - off_t(chunk.count))
        let count = Int(end - start)
        guard chunk.withUnsafeMutableBytes({ pread(fd, $0.baseAddress, count, start) }) == count else {
            throw StoreError(.unavailable, "cannot read \(path): errno \(errno)")
        }
        if let index = chunk[..<count].lastIndex(of: UInt8(ascii: "\n")) {
            keep = start + off_t(index) + 1
            break search
        }
        end = start
    }
    guard ftruncate(fd, keep) == 0, fsync(fd) == 0 else {
        throw StoreError(.unavailable, "cannot repair \(path): errno \(errno)")
    }
}
