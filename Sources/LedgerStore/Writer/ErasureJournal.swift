import Foundation
import LMDBKit
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
    struct Entry: Codable, Hashable, Sendable {
        var seq: UInt64
        var time: String
        var actor: String
        var reason: String
        var pseudonym: String
        var registeredSeq: UInt64
        var registeredHash: String
    }

    static let fileName = "erasures.jsonl"

    /// Meta key (seq u64): `erased` events from this seq on may not be in the journal yet. Set in the transaction
    /// that commits an erasure (the writer's, or a follower's applying one), cleared once their lines are written
    /// and synced (``ErasureCompaction``), so that an erasure whose line a failure, a full disk or a crash kept out
    /// of the journal is journaled later, before the next write and at the next open.
    static let owedKey = "erasuresJournalOwedFrom"

    /// Notes, in `txn`, that the erasures from `seq` on are owed to the journal.
    static func markOwed(from seq: UInt64, txn: LMDBTransaction, schema: LedgerSchema) throws {
        if let owed = try owedFrom(txn: txn, schema: schema), owed <= seq { return }
        try txn.put(schema.meta, key: owedKey, value: seq)
    }

    /// The seq from which erasures are owed to the journal; `nil` when none is.
    static func owedFrom(txn: LMDBTransaction, schema: LedgerSchema) throws -> UInt64? {
        try txn.withValue(in: schema.meta, forKey: owedKey) { value in
            guard let value else { return nil }
            guard value.count == 8 else { throw StoreError(.corrupt, "meta \(owedKey) holds \(value.count) bytes") }
            return value.loadBigEndianUInt64()
        }
    }

    /// Clears the debt noted from `seq`, unless a later erasure moved it since.
    static func settle(from seq: UInt64, txn: LMDBTransaction, schema: LedgerSchema) throws {
        guard try owedFrom(txn: txn, schema: schema) == seq else { return }
        _ = try txn.delete(schema.meta, key: owedKey)
    }

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
    /// newline (a write torn by a crash or a full disk, after its erasure committed) may fail to read: it is left
    /// out, and ``isTorn(directory:)`` says so; the erasure stays owed (``owedKey``) and its line is written again.
    /// Any other line that does not read is an erasure that would not be applied again, so it is an error.
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
