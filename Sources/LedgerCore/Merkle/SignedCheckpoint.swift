import Crypto
import Foundation

/// A checkpoint of a log: its origin, tree size and root hash — the body of a C2SP `tlog-checkpoint`.
public struct Checkpoint: Equatable, Sendable {
    public var origin: String
    public var size: UInt64
    public var root: [UInt8]

    public init(origin: String, size: UInt64, root: [UInt8]) {
        self.origin = origin
        self.size = size
        self.root = root
    }

    /// `<origin>\n<size>\n<base64 root>\n`: the text a signature covers.
    public var body: String { "\(origin)\n\(size)\n\(Data(root).base64EncodedString())\n" }

    /// Parses a checkpoint body: origin, size and root lines, then any extension lines (covered by the
    /// signature, not interpreted), each ended by a newline.
    public init?(body: Substring) {
        let lines = body.split(separator: "\n", omittingEmptySubsequences: false)
        guard lines.count >= 4, lines.last?.isEmpty == true, !lines[0].isEmpty, let size = Self.decimal(lines[1]),
            let root = Data(base64Encoded: String(lines[2])), root.count == MerkleHash.size,
            Data(root).base64EncodedString() == lines[2]
        else { return nil }
        self.init(origin: String(lines[0]), size: size, root: Array(root))
    }

    /// A tree size as C2SP writes one: ASCII digits without leading zeroes (`0` alone for zero), within UInt64.
    public static func decimal(_ text: Substring) -> UInt64? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
            text.first != "0" || text == "0"
        else { return nil }
        return UInt64(text)
    }
}

/// An Ed25519 key of a signed-note signer, with the name notes carry (C2SP `signed-note`).
public struct NoteSigner: Sendable {
    public let name: String
    /// The private key's 32-byte seed (swift-crypto's key type is not `Sendable`).
    private let seed: [UInt8]

    /// - Throws: ``NoteError`` when `name` is empty or holds a space, a `+` or a newline.
    public init(name: String, key: Curve25519.Signing.PrivateKey) throws(NoteError) {
        guard NoteVerifier.isValidName(name) else { throw .malformed("a key name is non-empty, without spaces or +") }
        self.name = name
        self.seed = Array(key.rawRepresentation)
    }

    public var key: Curve25519.Signing.PrivateKey {
        // The seed came from a valid key.
        try! Curve25519.Signing.PrivateKey(rawRepresentation: seed)
    }

    public var verifier: NoteVerifier {
        NoteVerifier(name: name, publicKey: Array(key.publicKey.rawRepresentation))
    }

    /// Go `note`'s signer key: `PRIVATE+KEY+<name>+<8 hex digits of the key hash>+<base64(0x01 ‖ seed)>`.
    /// Secret: never logged or printed.
    public var signerKeyLine: String {
        Self.signerPrefix + NoteVerifier.keyLine(name: name, keyHash: verifier.keyHash, key: seed)
    }

    /// Parses a signer key line; nil when malformed or when its key hash does not match its name and key.
    public init?(signerKeyLine: String) {
        guard signerKeyLine.hasPrefix(Self.signerPrefix),
            let parts = NoteVerifier.splitKeyLine(signerKeyLine.dropFirst(Self.signerPrefix.count)),
            let key = try? Curve25519.Signing.PrivateKey(rawRepresentation: parts.key),
            let signer = try? NoteSigner(name: parts.name, key: key),
            Hex.encode(signer.verifier.keyHash) == parts.keyHash
        else { return nil }
        self = signer
    }

    private static let signerPrefix = "PRIVATE+KEY+"

    /// The signed note: the checkpoint's body, a blank line, and one signature line
    /// `— <name> <base64(key hash ‖ signature)>`.
    public func sign(_ checkpoint: Checkpoint) throws -> String {
        let body = checkpoint.body
        let signature = try key.signature(for: Data(body.utf8))
        let blob = verifier.keyHash + Array(signature)
        return body + "\n" + "\u{2014} \(name) \(Data(blob).base64EncodedString())\n"
    }
}

/// A verifier key: the name, the 4-byte key hash and the Ed25519 public key, printed as
/// `<name>+<8 hex digits of the key hash>+<base64(0x01 ‖ public key)>`.
public struct NoteVerifier: Equatable, Sendable {
    public static let ed25519: UInt8 = 0x01
    public let name: String
    public let publicKey: [UInt8]

    public init(name: String, publicKey: [UInt8]) {
        self.name = name
        self.publicKey = publicKey
    }

    /// The first 4 bytes of SHA-256(name ‖ "\n" ‖ 0x01 ‖ public key).
    public var keyHash: [UInt8] {
        Array(SHA256.hash(data: Array(name.utf8) + [0x0A, Self.ed25519] + publicKey).prefix(4))
    }

    public var keyLine: String { Self.keyLine(name: name, keyHash: keyHash, key: publicKey) }

    /// Parses a key line; nil when malformed or when its key hash does not match its name and key.
    public init?(keyLine: String) {
        guard let parts = Self.splitKeyLine(Substring(keyLine)) else { return nil }
        self.init(name: parts.name, publicKey: parts.key)
        guard Hex.encode(keyHash) == parts.keyHash else { return nil }
    }

    /// `<name>+<8 hex digits of the key hash>+<base64(0x01 ‖ key)>`: the shape of both key lines.
    static func keyLine(name: String, keyHash: [UInt8], key: [UInt8]) -> String {
        "\(name)+\(Hex.encode(keyHash))+\(Data([ed25519] + key).base64EncodedString())"
    }

    /// The parts of a key line (the key hash as written, unchecked); nil when malformed. `type` is the key's first
    /// byte: 0x01 for a signed-note key, 0x04 for a cosigner's (C2SP tlog-cosignature).
    static func splitKeyLine(_ line: Substring, type: UInt8 = ed25519) -> (
        name: String, keyHash: Substring, key: [UInt8]
    )? {
        // The name holds no '+'; the base64 key may.
        let parts = line.split(separator: "+", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, isValidName(String(parts[0])), parts[1].count == 8,
            let blob = Data(base64Encoded: String(parts[2])), blob.count == 33, blob.first == type
        else { return nil }
        return (String(parts[0]), parts[1], Array(blob.dropFirst()))
    }

    public static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && !name.unicodeScalars.contains { $0 == " " || $0 == "+" || $0 == "\n" || $0.value < 0x20 }
    }

    /// The checkpoint of `note` if one of its signatures is this key's and verifies; else a reason.
    public func verify(note: String) throws(NoteError) -> Checkpoint {
        guard let split = note.range(of: "\n\n") else { throw .malformed("a signed note has a blank line") }
        let body = note[note.startIndex..<note.index(after: split.lowerBound)]
        let signatures = note[split.upperBound...]
        guard let checkpoint = Checkpoint(body: body) else {
            throw .malformed("the note's text is not a checkpoint (origin, size, base64 root hash)")
        }
        guard signatures.hasSuffix("\n") else { throw .malformed("signature lines end with a newline") }
        guard let key = try? Curve25519.Signing.PublicKey(rawRepresentation: publicKey) else {
            throw .malformed("the verifier key is not an Ed25519 public key")
        }
        for line in signatures.dropLast().split(separator: "\n", omittingEmptySubsequences: false) {
            let fields = line.split(separator: " ", omittingEmptySubsequences: false)
            guard fields.count == 3, fields[0] == "\u{2014}", let blob = Data(base64Encoded: String(fields[2])),
                blob.count > 4
            else { throw .malformed("a signature line is `\u{2014} <name> <base64>`") }
            guard fields[1] == name, Array(blob.prefix(4)) == keyHash else { continue }
            guard key.isValidSignature(blob.dropFirst(4), for: Data(body.utf8)) else {
                throw .badSignature("the signature of \(name) does not verify")
            }
            return checkpoint
        }
        throw .badSignature("the note has no signature by \(name)")
    }
}

public enum NoteError: Error, Equatable, CustomStringConvertible {
    case malformed(String)
    case badSignature(String)

    public var description: String {
        switch self {
        case .malformed(let message), .badSignature(let message): message
        }
    }
}
