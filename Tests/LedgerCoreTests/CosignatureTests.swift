import Crypto
import Foundation
import LedgerCore
import Testing

@Suite("Cosignatures (C2SP tlog-cosignature) and the witness's checks (C2SP tlog-witness)")
struct CosignatureTests {
    static let logSigner = try! NoteSigner(
        name: "example.com/log", key: Curve25519.Signing.PrivateKey(rawRepresentation: [UInt8](repeating: 7, count: 32))
    )
    static let cosigner = try! Cosigner(name: "witness.example/w1", seed: [UInt8](repeating: 9, count: 32))
    static let leaves: [[UInt8]] = (0..<20).map { MerkleHash.leaf(Array(SHA256.hash(data: Array("l\($0)".utf8)))) }

    static func note(size: Int, leaves: [[UInt8]] = leaves) throws -> SignedNote {
        let tree = MerkleTree(size: UInt64(size), source: InMemoryMerkleLeaves(leaves: leaves))
        let text = try logSigner.sign(Checkpoint(origin: "example.com/log", size: UInt64(size), root: try tree.root()))
        return try SignedNote(parsing: text)
    }

    @Test("a cosignature line is key ID, big-endian time and an Ed25519 signature over cosignature/v1, time, body")
    func lineLayout() throws {
        let note = try Self.note(size: 5)
        let line = try Self.cosigner.cosign(note, time: 1_679_315_147)
        let fields = line.split(separator: " ")
        #expect(fields.count == 3 && fields[0] == "\u{2014}" && fields[1] == "witness.example/w1")
        let blob = try #require(Data(base64Encoded: String(fields[2])))
        #expect(blob.count == 76)
        let verifier = Self.cosigner.verifier
        // The key ID, from the spec's formula, by hand.
        let id = Array(SHA256.hash(data: Array("witness.example/w1\n".utf8) + [0x04] + verifier.publicKey).prefix(4))
        #expect(Array(blob.prefix(4)) == id)
        #expect(Array(blob[4..<12]) == [0, 0, 0, 0, 0x64, 0x18, 0x50, 0xCB])  // 1679315147
        let message = "cosignature/v1\ntime 1679315147\n" + note.body
        let key = try Curve25519.Signing.PublicKey(rawRepresentation: verifier.publicKey)
        #expect(key.isValidSignature(blob[12...], for: Data(message.utf8)))
        #expect(verifier.cosignedTime(of: note.adding([line])) == 1_679_315_147)
        // The log's own signature still verifies on the cosigned note.
        #expect(try Self.logSigner.verifier.verify(note: note.adding([line]).text).size == 5)
    }

    @Test("a cosignature does not count on another body, under another name, or from another key")
    func refusals() throws {
        let note = try Self.note(size: 5)
        let line = try Self.cosigner.cosign(note, time: 100)
        let other = try Self.note(size: 6)
        #expect(Self.cosigner.verifier.cosignedTime(of: other.adding([line])) == nil)
        let renamed = try Cosigner(name: "witness.example/w2", seed: [UInt8](repeating: 9, count: 32))
        #expect(renamed.verifier.cosignedTime(of: note.adding([line])) == nil)
        let stranger = try Cosigner(name: "witness.example/w1", seed: [UInt8](repeating: 3, count: 32))
        #expect(stranger.verifier.cosignedTime(of: note.adding([line])) == nil)
        // The time is signed: changing it breaks the signature.
        var blob = Array(Data(base64Encoded: String(line.split(separator: " ")[2]))!)
        blob[11] ^= 1
        let forged = "\u{2014} witness.example/w1 \(Data(blob).base64EncodedString())"
        #expect(Self.cosigner.verifier.cosignedTime(of: note.adding([forged])) == nil)
        // Counting: each key once, however many lines it has.
        let two = note.adding([line, try Self.cosigner.cosign(note, time: 101)])
        #expect(CosignatureVerifier.count([Self.cosigner.verifier, Self.cosigner.verifier], on: two) == 1)
    }

    @Test("vkeys round-trip; a signed-note key (type 0x01) or a wrong key ID is not a cosigner vkey")
    func vkeys() throws {
        let vkey = Self.cosigner.verifier.vkey
        #expect(CosignatureVerifier(vkey: vkey) == Self.cosigner.verifier)
        #expect(CosignatureVerifier(vkey: Self.logSigner.verifier.keyLine) == nil)
        var parts = vkey.split(separator: "+", maxSplits: 2).map(String.init)
        parts[1] = "00000000"
        #expect(CosignatureVerifier(vkey: parts.joined(separator: "+")) == nil)
        #expect(CosignatureVerifier(vkey: "no-plus") == nil)
        #expect(throws: NoteError.self) { try Cosigner(name: "has space", seed: [UInt8](repeating: 1, count: 32)) }
    }

    @Test("add-checkpoint bodies: the spec's shape parses; leading zeroes, 64 proof lines, no blank line do not")
    func requestBodies() throws {
        let note = try Self.note(size: 9)
        let proof = try MerkleTree(size: 9, source: InMemoryMerkleLeaves(leaves: Self.leaves)).consistencyProof(from: 4)
        let request = AddCheckpointRequest(oldSize: 4, proof: proof, note: note)
        #expect(try AddCheckpointRequest(parsing: request.text) == request)
        #expect(request.text.hasPrefix("old 4\n"))
        for bad in [
            "old 04\n\n" + note.text, "old -1\n\n" + note.text, "old\n\n" + note.text, "old 4\n" + note.text,
            "old 4\nnot-base64\n\n" + note.text, "old 4\n\n" + note.body,
            "old 4\n" + String(repeating: Data(count: 32).base64EncodedString() + "\n", count: 64) + "\n" + note.text,
            "old 99999999999999999999\n\n" + note.text,
        ] {
            #expect(throws: NoteError.self, "\(bad.prefix(30))") { try AddCheckpointRequest(parsing: bad) }
        }
        let sixtyThree =
            "old 4\n" + String(repeating: Data(count: 32).base64EncodedString() + "\n", count: 63) + "\n" + note.text
        #expect(try AddCheckpointRequest(parsing: sixtyThree).proof.count == 63)
    }

    @Test("the witness's decisions follow the spec's order")
    func decisions() throws {
        let keys = ["example.com/log": [Self.logSigner.verifier]]
        let tree = MerkleTree(size: 9, source: InMemoryMerkleLeaves(leaves: Self.leaves))
        let held = (
            size: UInt64(4), root: try MerkleTree(size: 4, source: InMemoryMerkleLeaves(leaves: Self.leaves)).root()
        )
        let note = try Self.note(size: 9)
        func check(_ old: UInt64, _ proof: [[UInt8]], _ note: SignedNote, latest: (UInt64, [UInt8])? = held)
            -> WitnessDecision
        {
            WitnessPolicy.check(
                AddCheckpointRequest(oldSize: old, proof: proof, note: note), logKeys: keys,
                latest: latest.map { (size: $0.0, root: $0.1) })
        }
        let proof = try tree.consistencyProof(from: 4)
        var forked = Self.leaves
        forked[0] = MerkleHash.leaf([1])
        let sameSize = try Self.note(size: 4)
        // The case table (WitnessPolicy's doc comment), in the spec's order.
        let cases: [(String, WitnessDecision, WitnessDecision)] = [
            ("old size above the checkpoint's", check(10, [], note), .oldSizeTooLarge),
            ("old size not the latest", check(3, proof, note), .conflict(latestSize: 4)),
            ("a non-empty proof from 0", check(0, proof, note, latest: nil), .badProof),
            ("an empty proof from 0", check(0, [], note, latest: nil), .cosign),
            ("a proof that does not verify", check(4, Array(proof.dropLast()), note), .badProof),
            ("a proof that verifies", check(4, proof, note), .cosign),
            ("equal sizes, equal roots, an empty proof", check(4, [], sameSize), .cosign),
            ("equal sizes, equal roots, a non-empty proof", check(4, [proof[0]], sameSize), .badProof),
            (
                "equal sizes, different signed roots", check(4, [], try Self.note(size: 4, leaves: forked)),
                .differentRoot
            ),
            (
                "equal sizes, different roots, a proof", check(4, [proof[0]], try Self.note(size: 4, leaves: forked)),
                .differentRoot
            ),
        ]
        for (name, decided, expected) in cases { #expect(decided == expected, "\(name)") }
        // Only two checkpoints the log signed are evidence; nothing that rests on a proof is.
        #expect(WitnessDecision.differentRoot.isEvidence && !WitnessDecision.badProof.isEvidence)
        // Unknown origin before the signature; an untrusted signature before anything else.
        let stranger = try NoteSigner(name: "example.com/log", key: Curve25519.Signing.PrivateKey())
        let foreign = try SignedNote(parsing: stranger.sign(note.checkpoint))
        #expect(check(99, [], foreign) == .forbidden)
        #expect(
            WitnessPolicy.check(
                AddCheckpointRequest(oldSize: 99, proof: [], note: note), logKeys: [:], latest: nil) == .unknownOrigin)
    }
}
