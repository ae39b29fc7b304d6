import Foundation
import LedgerCore

/// `<ledger>/erasures.jsonl`: every erasure of the ledger, one JSON line each, beside the data file and never
/// in a backup of it — so that a ledger restored from a backup older than an erasure has the erasure applied
/// again when a writer opens it, and nothing erased comes back.
///
/// A line names the device only as the log does after the erasure: `{"seq", "time", "actor", "reason",
/// "pseudonym", "registeredSeq", "registeredHash"}` — the seq of its first `registered` event and that
/// event's chain hash (which an erasure keeps), by which an older copy's record is recognised as the same
/// device's.
enum ErasureJournal {
    struct Entry: Codable, Equatable, Sendable {
        var seq: UInt64
        var time: String
        var actor: String
        var reason: String
        var pseudonym: String
        var registeredSeq: UInt64
        var registeredHash: String
    }

    static let fileName = "erasures.jsonl"

    /// Appends `entries` and syncs the file (created 0600).
    static func append(_ entries: [Entry], directory: String) throws {
        guard !entries.isEmpty else { return }
        let path = directory + "/" + fileName
        let descriptor = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw StoreError(.unavailable, "cannot open \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        try dropTornLine(descriptor: descriptor)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        var bytes: [UInt8] = []
        for entry in entries {
            bytes += try encoder.encode(entry)
            bytes.append(UInt8(ascii: "\n"))
        }
        let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        guard written == bytes.count, fsync(descriptor) == 0 else {
            throw StoreError(.unavailable, "cannot write \(path): \(String(cString: strerror(errno)))")
        }
    }

    /// The entries of the journal in `directory` (none when there is no journal). Only a last line without its
    /// newline (a write torn by a crash, after its erasure committed) may fail to read: it is left out, and
    /// ``isTorn(directory:)`` says so, for the writer to journal that erasure again (``Ledger``'s open). Any other
    /// line that does not read is an erasure that would not be applied again, so it is an error.
    ///
    /// - Throws: `.corrupt` naming the file and the line.
    static func read(directory: String) throws -> [Entry] {
        let path = directory + "/" + fileName
        guard let data = FileManager.default.contents(atPath: path) else { return [] }
        let decoder = JSONDecoder()
        let lines = data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        var entries: [Entry] = []
        for (index, line) in lines.enumerated() where !line.isEmpty {
            if index == lines.count - 1 { break }  // torn: no newline after it
            guard let entry = try? decoder.decode(Entry.self, from: line) else {
                throw StoreError(
                    .corrupt,
                    "\(path) line \(index + 1) does not read as an erasure: an erasure it records would not be "
                        + "applied to a restored copy; repair or restore the file (docs/operations.md, "
                        + "\"Erasures and restores\")")
            }
            entries.append(entry)
        }
        return entries
    }

    /// Whether the journal in `directory` ends in a torn line (bytes after its last newline).
    static func isTorn(directory: String) -> Bool {
        guard let data = FileManager.default.contents(atPath: directory + "/" + fileName) else { return false }
        return data.last.map { $0 != UInt8(ascii: "\n") } ?? false
    }

    /// Drops a torn last line of the journal in `directory`, and syncs the file.
    static func dropTornLine(directory: String) throws {
        let path = directory + "/" + fileName
        let descriptor = open(path, O_RDWR | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw StoreError(.unavailable, "cannot open \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        try dropTornLine(descriptor: descriptor)
        guard fsync(descriptor) == 0 else {
            throw StoreError(.unavailable, "cannot sync \(path): \(String(cString: strerror(errno)))")
        }
    }

    /// Drops a torn last line (bytes a crash left after the last newline), so that the next entry starts a line of
    /// its own.
    private static func dropTornLine(descriptor: Int32) throws {
        let size = lseek(descriptor, 0, SEEK_END)
        guard size > 0 else { return }
        var end = size
        var byte: UInt8 = 0
        while end > 0 {
            guard pread(descriptor, &byte, 1, end - 1) == 1 else {
                throw StoreError(.unavailable, "cannot read \(fileName): \(String(cString: strerror(errno)))")
            }
            if byte == UInt8(ascii: "\n") { break }
            end -= 1
        }
        guard end < size else { return }
        guard ftruncate(descriptor, end) == 0 else {
            throw StoreError(.unavailable, "cannot truncate \(fileName): \(String(cString: strerror(errno)))")
        }
    }
}
