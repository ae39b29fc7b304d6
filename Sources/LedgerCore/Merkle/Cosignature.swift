import Crypto
import Foundation

/// A signed note split into its text and its signature lines (C2SP `signed-note`): what a witness cosigns is
/// the text exactly as the log wrote it, extension lines included.
public struct SignedNote: Sendable, Equatable {
    /// The note's text, through its last newline (the blank line not included).
    public let body: String
    /// The signature lines, each without its newline.
    public let signatureLines: [String]
    /// The checkpoint the text holds (origin, size, root; extension lines are covered, not interpreted).
    public let checkpoint: Checkpoint

    /// - Throws: ``NoteError/malformed(_:)`` when there is no blank line, the text is not a checkpoint, or a
    ///   signature line is not `— <name> <base64>` ending in a newline.
    public init(parsing note: String) throws(NoteError) {
        guard let split = note.range(of: "\n\n") else { throw .malformed("a signed note has a blank line") }
        let body = String(note[note.startIndex..<note.index(after: split.lowerBound)])
        guard let checkpoint = Checkpoint(body: Substring(body)) else {
            throw .malformed("the note's text is not a checkpoint (origin, size, base64 root hash)")
        }
        let signatures = note[split.upperBound...]
        guard !signatures.isEmpty, signatures.hasSuffix("\n") else {
            throw .malformed("a signed note has signature lines, each ending with a newline")
        }
        var lines: [String] = []
        for line in signatures.dropLast().split(separator: "\n", omittingEmptySubsequences: false) {
            guard Self.signature(of: line) != nil else {
                throw .malformed("a signature line is `\u{2014} <name> <base64>`")
            }
            lines.append(String(line))
        }
        self.body = body
        self.signatureLines = lines
        self.checkpoint = checkpoint
    }

    /// The note: the text, a blank line, and the signature lines.
    public var text: String { body + "\n" + signatureLines.map { $0 + "\n" }.joined() }

    /// The note with `lines` added (a line it already has is not repeated).
    public func adding(_ lines: [String]) -> SignedNote {
        SignedNote(
            body: body, signatureLines: signatureLines + lines.filter { !signatureLines.contains($0) },
            checkpoint: checkpoint)
    }

    /// The note with only `lines` of its signature lines, each once (in their order).
    public func keeping(_ lines: [String]) -> SignedNote {
        var seen = Set<String>()
        let kept = signatureLines.filter { lines.contains($0) && seen.insert($0).inserted }
        return SignedNote(body: body, signatureLines: kept, checkpoint: checkpoint)
    }

    private init(body: String, signatureLines: [String], checkpoint: Checkpoint) {
        self.body = body
        self.signatureLines = signatureLines
        self.checkpoint = checkpoint
    }

    /// The name and the decoded `key ID ‖ signature` of a line `— <name> <base64>`; nil when malformed.
    public static func signature(of line: Substring) -> (name: Substring, blob: [UInt8])? {
        let fields = line.split(separator: " ", omittingEmptySubsequences: false)
        guard fields.count == 3, fields[0] == "\u{2014}", !fields[1].isEmpty,
            let blob = Data(base64Encoded: String(fields[2])), blob.count > 4
        else { return nil }
        return (fields[1], Array(blob))
    }
}

/// A cosigner's verifier key (C2SP `tlog-cosignature`, `cosignature/v1`, Ed25519): its name and public key,
/// printed as the vkey `<name>+<8 hex digits of the key ID>+<base64(0x04 ‖ public key)>`.
public struct CosignatureVerifier: Equatable, Hashable, Sendable {
    /// The signature type of an Ed25519 cosignature's key ID and vkey.
    public static let algorithm: UInt8 = 0x04
    public let name: String
    public let publicKey: [UInt8]

    public init(name: String, publicKey: [UInt8]) {
        self.name = name
        self.publicKey = publicKey
    }

    /// SHA-256(name ‖ "\n" ‖ 0x04 ‖ public key)[:4].
    public var keyID: [UInt8] {
        Array(SHA256.hash(data: Array(name.utf8) + [0x0A, Self.algorithm] + publicKey).prefix(4))
    }

    public var vkey: String {
        "\(name)+\(Hex.encode(keyID))+\(Data([Self.algorithm] + publicKey).base64EncodedString())"
    }

    /// Parses a vkey; nil when malformed, not an Ed25519 cosigner key (type 0x04), or when its key ID does not
    /// match its name and key.
    public init?(vkey: String) {
        guard let parts = NoteVerifier.splitKeyLine(Substring(vkey), type: Self.algorithm) else { return nil }
        self.init(name: parts.name, publicKey: parts.key)
        guard Hex.encode(keyID) == parts.keyHash else { return nil }
    }

    /// What a cosignature signs: `cosignature/v1\ntime <t>\n` and the note's text.
    public static func signedMessage(body: String, time: UInt64) -> [UInt8] {
        Array("cosignature/v1\ntime \(time)\n".utf8) + Array(body.utf8)
    }

    /// The time of this key's cosignature on `note`, when one of its lines is this key's and verifies; nil
    /// otherwise (lines of other keys are ignored, as the spec asks).
    public func cosignedTime(of note: SignedNote) -> UInt64? {
        guard let key = try? Curve25519.Signing.PublicKey(rawRepresentation: publicKey) else { return nil }
        let id = keyID
        for line in note.signatureLines {
            guard let (lineName, blob) = SignedNote.signature(of: Substring(line)), lineName == name,
                blob.count == 4 + 8 + 64, Array(blob.prefix(4)) == id
            else { continue }
            let time = blob[4..<12].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            // A timestamp above 2^63 - 1 is not a cosignature (C2SP tlog-cosignature).
            guard time <= UInt64(Int64.max),
                key.isValidSignature(blob[12...], for: Self.signedMessage(body: note.body, time: time))
            else { continue }
            return time
        }
        return nil
    }

    /// How many of `keys` (each counted once) have a valid cosignature on `note`.
    public static func count(_ keys: [CosignatureVerifier], on note: SignedNote) -> Int {
        Set(keys).filter { $0.cosignedTime(of: note) != nil }.count
    }
}

/// A cosigner's Ed25519 key with its name: a witness's, or a cluster node's.
public struct Cosigner: Sendable {
    public let name: String
    /// The private key's 32-byte seed (swift-crypto's key type is not `Sendable`).
    private let seed: [UInt8]

    /// - Throws: ``NoteError`` when `name` is empty or holds a space, a `+` or a newline.
    public init(name: String, seed: [UInt8]) throws(NoteError) {
        guard NoteVerifier.isValidName(name) else { throw .malformed("a key name is non-empty, without spaces or +") }
        guard seed.count == 32 else { throw .malformed("an Ed25519 seed is 32 bytes") }
        self.name = name
        self.seed = seed
    }

    private var key: Curve25519.Signing.PrivateKey {
        // 32 bytes, checked in init, are always a valid seed.
        try! Curve25519.Signing.PrivateKey(rawRepresentation: seed)
    }

    public var verifier: CosignatureVerifier {
        CosignatureVerifier(name: name, publicKey: Array(key.publicKey.rawRepresentation))
    }

    /// The line `— <name> <base64(key ID ‖ big-endian u64 time ‖ Ed25519 signature)>` (no newline).
    public func cosign(_ note: SignedNote, time: UInt64) throws -> String {
        let signature = try key.signature(for: CosignatureVerifier.signedMessage(body: note.body, time: time))
        let timeBytes = (0..<8).map { UInt8(truncatingIfNeeded: time >> (56 - 8 * UInt64($0))) }
        let blob = verifier.keyID + timeBytes + Array(signature)
        return "\u{2014} \(name) \(Data(blob).base64EncodedString())"
    }
}

/// The body of a C2SP tlog-witness `add-checkpoint` request: `old <size>`, up to 63 base64 consistency proof
/// lines, an empty line, then the signed checkpoint.
public struct AddCheckpointRequest: Sendable, Equatable {
    public static let maximumProofLines = 63
    public let oldSize: UInt64
    public let proof: [[UInt8]]
    public let note: SignedNote

    public init(oldSize: UInt64, proof: [[UInt8]], note: SignedNote) {
        self.oldSize = oldSize
        self.proof = proof
        self.note = note
    }

    /// - Throws: ``NoteError/malformed(_:)`` saying what is wrong (the witness answers 400).
    public init(parsing text: String) throws(NoteError) {
        guard let split = text.range(of: "\n\n") else {
            throw .malformed("the body is `old <size>`, proof lines, an empty line, then the checkpoint")
        }
        let head = text[text.startIndex..<split.lowerBound].split(separator: "\n", omittingEmptySubsequences: false)
        guard let first = head.first, first.hasPrefix("old "), let size = Checkpoint.decimal(first.dropFirst(4))
        else { throw .malformed("the first line is `old <size>`, a decimal without leading zeroes") }
        let lines = head.dropFirst()
        guard lines.count <= Self.maximumProofLines else {
            throw .malformed("a consistency proof has at most \(Self.maximumProofLines) lines")
        }
        var proof: [[UInt8]] = []
        for line in lines {
            guard let hash = Data(base64Encoded: String(line)), hash.count == MerkleHash.size else {
                throw .malformed("each proof line is one base64 SHA-256 hash")
            }
            proof.append(Array(hash))
        }
        self.init(oldSize: size, proof: proof, note: try SignedNote(parsing: String(text[split.upperBound...])))
    }

    public var text: String {
        "old \(oldSize)\n" + proof.map { Data($0).base64EncodedString() + "\n" }.joined() + "\n" + note.text
    }
}

/// What a witness answers an `add-checkpoint` (C2SP tlog-witness), decided by ``WitnessPolicy/check(_:logKeys:latest:)``.
public enum WitnessDecision: Equatable, Sendable {
    /// Consistent: record the checkpoint as the latest and cosign it.
    case cosign
    /// 404: the witness knows no log of this origin.
    case unknownOrigin
    /// 403: no signature verifies with a key the witness trusts for the origin.
    case forbidden
    /// 400: the old size is above the checkpoint's.
    case oldSizeTooLarge
    /// 409 with the witness's size: the old size is not the latest it cosigned.
    case conflict(latestSize: UInt64)
    /// 409: the same size as the latest with another root, both signed by the log — a fork (evidence).
    case differentRoot
    /// 422: the consistency proof does not lead from the latest root to the checkpoint's, or a proof was sent
    /// where none belongs (from size 0, or between equal sizes). Anyone can write a proof line, so this is never
    /// evidence: a log that forked shows it by a signed checkpoint of a size the witness cosigned.
    case badProof

    /// Whether the request proves a split view to a third party: two checkpoints the log signed, of one size,
    /// with different roots. Nothing that rests on a proof alone does.
    public var isEvidence: Bool { self == .differentRoot }
}

/// The checks of C2SP tlog-witness's `add-checkpoint`, in the spec's order, with nothing stored: the caller
/// decides and persists under one lock (or one write transaction), so that two requests cannot roll it back.
///
/// | request | answer |
/// | --- | --- |
/// | an origin the witness does not know | 404 |
/// | no signature by a key it trusts for the origin | 403 |
/// | old size above the checkpoint's | 400 |
/// | old size not the latest it cosigned | 409 with its size |
/// | a non-empty proof from 0 | 422 |
/// | a proof that does not verify | 422 |
/// | equal sizes, equal roots, an empty proof | 200 |
/// | equal sizes, equal roots, a non-empty proof | 422 |
/// | equal sizes, different roots | 409, evidence |
public enum WitnessPolicy {
    /// - Parameters:
    ///   - logKeys: the signed-note keys the witness trusts for each origin.
    ///   - latest: the size and root of the latest checkpoint cosigned for the request's origin, nil when none.
    public static func check(
        _ request: AddCheckpointRequest, logKeys: [String: [NoteVerifier]], latest: (size: UInt64, root: [UInt8])?
    ) -> WitnessDecision {
        let checkpoint = request.note.checkpoint
        guard let keys = logKeys[checkpoint.origin], !keys.isEmpty else { return .unknownOrigin }
        guard keys.contains(where: { (try? $0.verify(note: request.note.text)) != nil }) else { return .forbidden }
        guard request.oldSize <= checkpoint.size else { return .oldSizeTooLarge }
        let latestSize = latest?.size ?? 0
        guard request.oldSize == latestSize else { return .conflict(latestSize: latestSize) }
        guard let latest, latest.size > 0 else {
            // Nothing cosigned yet: the proof from size 0 is empty.
            return request.proof.isEmpty ? .cosign : .badProof
        }
        if checkpoint.size == latest.size {
            guard checkpoint.root == latest.root else { return .differentRoot }
            return request.proof.isEmpty ? .cosign : .badProof
        }
        let consistent = MerkleVerifier.verifyConsistency(
            proof: request.proof, oldSize: latest.size, newSize: checkpoint.size, oldRoot: latest.root,
            newRoot: checkpoint.root)
        return consistent ? .cosign : .badProof
    }

    /// `note` with only one signature line of each key of `keys` that verifies (and `also`, this witness's own
    /// lines): what a witness keeps of a note, so that lines from unknown keys, and a key's line repeated — anyone
    /// can add them — take no room.
    public static func logSigned(_ note: SignedNote, keys: [NoteVerifier], also: [String] = []) -> SignedNote {
        var unmatched = keys
        var kept: [String] = []
        for line in note.signatureLines {
            if also.contains(line) {
                if !kept.contains(line) { kept.append(line) }
                continue
            }
            guard
                let index = unmatched.firstIndex(where: { key in
                    (try? key.verify(note: note.body + "\n" + line + "\n")) != nil
                })
            else { continue }
            unmatched.remove(at: index)
            kept.append(line)
        }
        return note.keeping(kept)
    }
}
