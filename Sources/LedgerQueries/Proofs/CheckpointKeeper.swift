import LedgerStore
import Crypto
import Foundation
import LedgerCore

/// A project's checkpoint signer and the checkpoints it has signed, beside its ledger:
///
/// - `<data>/<project>/checkpoint.key`: the Ed25519 signing key, created on first use with mode 0600, in Go's
///   `note` signer-key format `PRIVATE+KEY+<name>+<key hash>+<base64(0x01 ‖ 32-byte seed)>`. A key file that
///   others can read is refused. Never logged, never printed.
/// - `<data>/<project>/checkpoints.jsonl`: every checkpoint signed, one JSON object a line
///   (`{"size":N,"note":"…"}`), appended under an exclusive lock — what an auditor can ask for later.
/// - `<data>/<project>/cosigned.jsonl`: with witnesses configured, each checkpoint that reached the quorum, with
///   its cosignature lines, in the same format — the server serves the last one.
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
    /// - Note: File I/O and an `fsync`: for a worker's thread, outside any lock and any transaction.
    public func signAndKeep(_ checkpoint: Checkpoint) throws -> String {
        let note = try signer.sign(checkpoint)
        try Self.keep(size: checkpoint.size, note: note, in: keptPath)
        return note
    }

    /// Keeps a checkpoint with the cosignatures of its witnesses' quorum (durable when it returns).
    public func keepCosigned(size: UInt64, note: String) throws {
        try Self.keep(size: size, note: note, in: cosignedPath)
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
        var data = data
        if let lastNewline = data.lastIndex(of: UInt8(ascii: "\n")) {
            data = data[...lastNewline]
        } else {
            data = Data()
        }
        return try data.split(separator: UInt8(ascii: "\n")).map { line in
            guard let kept = try? JSONDecoder().decode(KeptLine.self, from: Data(line)) else {
                throw StoreError(.corrupt, "\(keptPath) holds a line that is not a kept checkpoint")
            }
            return (kept.size, kept.note)
        }
    }

    /// One line of the kept checkpoints' file: `{"note":…,"size":…}`.
    private struct KeptLine: Codable {
        var note: String
        var size: UInt64
    }

    private static func keep(size: UInt64, note: String, in keptPath: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        var line = try encoder.encode(KeptLine(note: note, size: size))
        line.append(UInt8(ascii: "\n"))
        let fd = openFile(keptPath, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw StoreError(.unavailable, "cannot write \(keptPath): errno \(errno)") }
        defer { close(fd) }
        flock(fd, LOCK_EX)
        try dropTornTail(fd, path: keptPath)
        try writeDurably(fd, Array(line), path: keptPath)
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
