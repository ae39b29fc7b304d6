import Crypto
import Foundation
import LMDBKit
import LedgerCore
import LedgerStore

/// What a witness keeps, in LMDB in its data directory (`ledger witness`, C2SP tlog-witness):
///
/// - `latest`: per log origin, the latest checkpoint it cosigned (size, root, the cosigned note);
/// - `evidence`: every validly signed checkpoint that contradicted it (a different root at its size, or a
///   consistency proof that does not lead from its root), with what it held: proof of a split view.
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
        /// The note as submitted, with this witness's cosignature added.
        public var note: String
        /// The cosignature's time (POSIX seconds).
        public var time: UInt64
    }

    /// A checkpoint that contradicted what the witness held.
    public struct Evidence: Codable, Sendable, Equatable {
        public var origin: String
        /// When it was shown (POSIX seconds).
        public var time: UInt64
        /// `different-root` (409) or `inconsistent` (422).
        public var reason: String
        public var heldSize: UInt64
        /// The note the witness held (cosigned) at the time.
        public var heldNote: String
        /// The whole add-checkpoint body it was shown.
        public var submitted: String
    }

    /// A request's decision, and the cosignature line when it was cosigned.
    public struct Outcome: Sendable, Equatable {
        public var decision: WitnessDecision
        public var cosignature: String?
    }

    private let environment: LMDBEnvironment
    private let latestDatabase: LMDBDatabase
    private let evidenceDatabase: LMDBDatabase

    /// Opens (creating) the store in `directory` (made mode 0700 when missing).
    ///
    /// - Throws: `StoreError` `.unavailable` when the directory or the environment cannot be opened.
    public init(directory: String) throws {
        do {
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            var options = LMDBEnvironment.Options()
            options.mapSize = 1 << 24
            environment = try LMDBEnvironment(path: directory, options: options)
            (latestDatabase, evidenceDatabase) = try environment.write { txn in
                (try txn.openDatabase("latest", flags: .create), try txn.openDatabase("evidence", flags: .create))
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
                    note: request.note.adding([line]).text, time: time)
                try txn.put(latestDatabase, key: Self.key(origin), value: Array(try JSONEncoder().encode(record)))
                return Outcome(decision: decision, cosignature: line)
            case .differentRoot, .inconsistent:
                let evidence = Evidence(
                    origin: origin, time: time, reason: decision == .differentRoot ? "different-root" : "inconsistent",
                    heldSize: held?.size ?? 0, heldNote: held?.note ?? "", submitted: request.text)
                let next = try txn.withCursor(evidenceDatabase) { cursor in
                    try cursor.last().map { entry in
                        entry.key.reduce(UInt64(0)) { $0 << 8 | UInt64($1) } &+ 1
                    } ?? 1
                }
                try txn.put(evidenceDatabase, key: next, value: Array(try JSONEncoder().encode(evidence)))
                return Outcome(decision: decision, cosignature: nil)
            case .unknownOrigin, .forbidden, .oldSizeTooLarge, .conflict:
                return Outcome(decision: decision, cosignature: nil)
            }
        }
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
