import Crypto
import Foundation
import LMDBKit
import LedgerCore
import LedgerStore

/// What a witness keeps, in LMDB in its data directory (`ledger witness`, C2SP tlog-witness):
///
/// - `latest`: per log origin, the latest checkpoint it cosigned (size, root, the note with the log's signature
///   lines and its own cosignature — lines of unknown keys are not kept);
/// - `evidence`: what a third party can check of a split view — two checkpoints the log signed, of one origin and
///   one size, with different roots — once per (origin, size, root pair), each note with the log's own
///   signature lines only, at most ``evidenceByteLimit`` bytes in all (1 MiB by default; past it, the witness only counts:
///   ``Counters/evidenceDropped``). Nothing resting on a proof alone is kept: anyone can write a proof line.
///
/// ``add(_:logKeys:cosigner:time:)`` checks a request and persists the outcome in one write transaction, so
/// that two requests at once can never roll the size back (the spec's race), across processes too.
///
/// - Note: Thread-safe.
public final class WitnessStore: Sendable {
    /// The latest checkpoint cosigned for an origin.
    public struct Latest: Codable, Sendable, Equatable {
        public var origin: String
        public var size: UInt64
        /// Base64.
        public var root: String
        /// The note with the log's signature lines and this witness's cosignature.
        public var note: String
        /// The cosignature's time (POSIX seconds).
        public var time: UInt64
    }

    /// Two checkpoints the log signed, of one origin and size, with different roots: a split view.
    public struct Evidence: Codable, Sendable, Equatable {
        public var origin: String
        /// When it was shown (POSIX seconds).
        public var time: UInt64
        /// `different-root`.
        public var reason: String
        /// The size both checkpoints have.
        public var heldSize: UInt64
        /// The note the witness held (cosigned) at the time: the log's signature lines and its cosignature.
        public var heldNote: String
        /// The note it was shown, with the log's signature lines only.
        public var submittedNote: String
    }

    /// What the store has counted, for the witness's metrics.
    public struct Counters: Sendable, Equatable {
        /// Pieces of evidence kept, and their bytes.
        public var evidence: Int
        public var evidenceBytes: Int
        /// Contradictions not kept because the evidence had reached ``WitnessStore/evidenceByteLimit``.
        public var evidenceDropped: UInt64
    }

    /// A request's decision, the cosignature line when it was cosigned, and whether its evidence is new (kept
    /// now, or counted past the limit: a repeat of a pair already kept is neither).
    public struct Outcome: Sendable, Equatable {
        public var decision: WitnessDecision
        public var cosignature: String?
        public var newEvidence = false
    }

    /// The most bytes of evidence kept by default (about 1,500 pairs of checkpoint notes with a signature or two).
    public static let defaultEvidenceByteLimit = 1 << 20

    /// The most bytes of evidence kept.
    public let evidenceByteLimit: Int

    private let environment: LMDBEnvironment
    private let latestDatabase: LMDBDatabase
    private let evidenceDatabase: LMDBDatabase
    private let countersDatabase: LMDBDatabase
    /// The keys of the pairs counted past the limit, so that each is counted once.
    private let droppedDatabase: LMDBDatabase

    /// Opens (creating) the store in `directory` (made mode 0700 when missing).
    ///
    /// - Throws: `StoreError` `.unavailable` when the directory or the environment cannot be opened.
    public init(directory: String, evidenceByteLimit: Int = WitnessStore.defaultEvidenceByteLimit) throws {
        self.evidenceByteLimit = evidenceByteLimit
        do {
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            var options = LMDBEnvironment.Options()
            options.mapSize = 1 << 24
            environment = try LMDBEnvironment(path: directory, options: options)
            (latestDatabase, evidenceDatabase, countersDatabase, droppedDatabase) = try environment.write { txn in
                (
                    try txn.openDatabase("latest", flags: .create), try txn.openDatabase("evidence", flags: .create),
                    try txn.openDatabase("counters", flags: .create), try txn.openDatabase("dropped", flags: .create)
                )
            }
        } catch {
            throw StoreError(.unavailable, "cannot open the witness's store in \(directory): \(error)")
        }
    }

    /// Checks `request` against the latest checkpoint of its origin and, in the same write transaction, records
    /// the new latest (cosigned) or the evidence; commits before returning.
    public func add(
        _ request: AddCheckpointRequest, logKeys: [String: [NoteVerifier]], cosigner: Cosigner, time: UInt64
    ) throws -> Outcome {
        let origin = request.note.checkpoint.origin
        let keys = logKeys[origin] ?? []
        return try environment.write { txn in
            let held = try latest(origin: origin, in: txn)
            let decision = WitnessPolicy.check(
                request, logKeys: logKeys,
                latest: held.flatMap { held in Data(base64Encoded: held.root).map { (held.size, Array($0)) } })
            switch decision {
            case .cosign:
                let line = try cosigner.cosign(request.note, time: time)
                let checkpoint = request.note.checkpoint
                let record = Latest(
                    origin: origin, size: checkpoint.size, root: Data(checkpoint.root).base64EncodedString(),
                    note: WitnessPolicy.logSigned(request.note.adding([line]), keys: keys, also: [line]).text,
                    time: time)
                try txn.put(latestDatabase, key: Self.key(origin), value: Array(try JSONEncoder().encode(record)))
                return Outcome(decision: decision, cosignature: line)
            case .differentRoot:
                guard let held, let heldRoot = Data(base64Encoded: held.root) else {
                    return Outcome(decision: decision, cosignature: nil)
                }
                let evidence = Evidence(
                    origin: origin, time: time, reason: "different-root", heldSize: held.size, heldNote: held.note,
                    submittedNote: WitnessPolicy.logSigned(request.note, keys: keys).text)
                let isNew = try keep(
                    evidence, key: Self.evidenceKey(origin, held.size, Array(heldRoot), request.note.checkpoint.root),
                    in: txn)
                return Outcome(decision: decision, cosignature: nil, newEvidence: isNew)
            case .unknownOrigin, .forbidden, .oldSizeTooLarge, .conflict, .badProof:
                return Outcome(decision: decision, cosignature: nil)
            }
        }
    }

    /// Keeps `evidence` under `key` unless the pair is kept (or was counted) already; past ``evidenceByteLimit``
    /// only counts it, once, and remembers its key (32 bytes: only the log can make another pair). Returns whether
    /// it was new.
    private func keep(_ evidence: Evidence, key: [UInt8], in txn: LMDBTransaction) throws -> Bool {
        guard try txn.value(in: evidenceDatabase, forKey: key) == nil,
            try txn.value(in: droppedDatabase, forKey: key) == nil
        else { return false }
        let value = Array(try JSONEncoder().encode(evidence))
        let bytes = try counter(Self.evidenceBytesKey, in: txn)
        guard bytes + UInt64(value.count) <= UInt64(max(0, evidenceByteLimit)) else {
            try txn.put(droppedDatabase, key: key, value: [UInt8]())
            try txn.put(
                countersDatabase, key: Self.droppedKey, value: try counter(Self.droppedKey, in: txn) &+ 1)
            return true
        }
        try txn.put(evidenceDatabase, key: key, value: value)
        try txn.put(countersDatabase, key: Self.evidenceBytesKey, value: bytes + UInt64(value.count))
        return true
    }

    /// The counters, for the witness's metrics.
    public func counters() throws -> Counters {
        try environment.read { txn in
            Counters(
                evidence: try txn.count(evidenceDatabase),
                evidenceBytes: Int(clamping: try counter(Self.evidenceBytesKey, in: txn)),
                evidenceDropped: try counter(Self.droppedKey, in: txn))
        }
    }

    private func counter(_ key: [UInt8], in txn: LMDBTransaction) throws -> UInt64 {
        try txn.withValue(in: countersDatabase, forKey: key) { $0?.count == 8 ? $0?.loadBigEndianUInt64() : nil } ?? 0
    }

    private static let evidenceBytesKey = Array("evidence-bytes".utf8)
    private static let droppedKey = Array("evidence-dropped".utf8)

    /// A contradiction's key: SHA-256 of the origin, the size and the two roots in byte order, so that the same
    /// pair shown again, either way round, is the same piece.
    private static func evidenceKey(_ origin: String, _ size: UInt64, _ first: [UInt8], _ second: [UInt8]) -> [UInt8] {
        let roots = [first, second].sorted { $0.lexicographicallyPrecedes($1) }
        var hasher = SHA256()
        hasher.update(data: Array(origin.utf8) + [0x0A] + withUnsafeBytes(of: size.bigEndian, Array.init))
        for root in roots { hasher.update(data: root) }
        return Array(hasher.finalize())
    }

    /// The latest checkpoint cosigned for `origin`, nil when none.
    public func latest(origin: String) throws -> Latest? {
        try environment.read { try latest(origin: origin, in: $0) }
    }

    /// Every piece of evidence kept, oldest first.
    public func evidence() throws -> [Evidence] {
        try environment.read { txn in
            var found: [Evidence] = []
            try txn.withCursor(evidenceDatabase) { cursor in
                try cursor.forEach { entry in
                    found.append(try JSONDecoder().decode(Evidence.self, from: Data(entry.value)))
                    return true
                }
            }
            return found
        }
    }

    private func latest(origin: String, in txn: LMDBTransaction) throws -> Latest? {
        guard let bytes = try txn.value(in: latestDatabase, forKey: Self.key(origin)) else { return nil }
        return try JSONDecoder().decode(Latest.self, from: Data(bytes))
    }

    /// An origin's key: its SHA-256 (an origin is a line of any length; LMDB keys stop at 511 bytes).
    private static func key(_ origin: String) -> [UInt8] { Array(SHA256.hash(data: Array(origin.utf8))) }
}
