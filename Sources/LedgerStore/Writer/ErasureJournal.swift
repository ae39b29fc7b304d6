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
        let descriptor = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw StoreError(.unavailable, "cannot open \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
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

    /// The entries of the journal in `directory` (none when there is no journal). A line that does not read
    /// (a torn last line after a crash) is skipped.
    static func read(directory: String) -> [Entry] {
        guard let data = FileManager.default.contents(atPath: directory + "/" + fileName) else { return [] }
        let decoder = JSONDecoder()
        return data.split(separator: UInt8(ascii: "\n")).compactMap { try? decoder.decode(Entry.self, from: $0) }
    }
}
