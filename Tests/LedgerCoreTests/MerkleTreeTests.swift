import Crypto
import Foundation
import LedgerCore
import LedgerTestSupport
import Testing

@Suite("Merkle tree (RFC 6962 / 9162) and signed checkpoints (C2SP)", .offThePool)
struct MerkleTreeTests {
    /// 300 leaves: leaf i hashes the 32 bytes of SHA-256("leaf i"), standing in for a chain hash.
    static let leaves: [[UInt8]] = (0..<300).map {
        MerkleHash.leaf(Array(SHA256.hash(data: Array("leaf \($0)".utf8))))
    }
    static let source = InMemoryMerkleLeaves(leaves: leaves)

    /// MTH straight from RFC 6962 §2.1, over an array: what the tree must agree with.
    static func referenceRoot(_ leaves: ArraySlice<[UInt8]>) -> [UInt8] {
        if leaves.isEmpty { return Array(SHA256.hash(data: [UInt8]())) }
        if leaves.count == 1 { return leaves.first! }
        var split = 1
        while split * 2 < leaves.count { split *= 2 }
        let middle = leaves.startIndex + split
        return MerkleHash.node(referenceRoot(leaves[..<middle]), referenceRoot(leaves[middle...]))
    }

    func tree(_ size: Int) -> MerkleTree<InMemoryMerkleLeaves> {
        MerkleTree(size: UInt64(size), source: Self.source)
    }

    @Test("hashes are RFC 6962's: the empty tree, a leaf, a node")
    func knownHashes() {
        // The empty tree and the leaf of the empty string, from RFC 6962's test vectors (CT's merkle tests).
        #expect(MerkleHash.empty.hex == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(MerkleHash.leaf([]).hex == "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d")
        let a = MerkleHash.leaf([0x00])
        let b = MerkleHash.leaf([0x10])
        #expect(MerkleHash.node(a, b) == Array(SHA256.hash(data: [0x01] + a + b)))
        #expect(MerkleHash.node(a, b) != MerkleHash.node(b, a))
    }

    @Test("the roots of Certificate Transparency's eight test leaves")
    func certificateTransparencyVectors() throws {
        let data: [[UInt8]] = [
            [], [0x00], [0x10], [0x20, 0x21], [0x30, 0x31], [0x40, 0x41, 0x42, 0x43],
            [0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57], Array(0x60...0x6f),
        ]
        let roots = [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
            "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
            "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
            "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
            "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
        ]
        let source = InMemoryMerkleLeaves(leaves: data.map { MerkleHash.leaf($0) })
        for (index, root) in roots.enumerated() {
            #expect(try MerkleTree(size: UInt64(index + 1), source: source).root().hex == root, "size \(index + 1)")
        }
    }

    @Test("the root of every size 0…300 equals the RFC's recursive definition")
    func roots() throws {
        #expect(try tree(0).root() == MerkleHash.empty)
        for size in 1...300 {
            #expect(try tree(size).root() == Self.referenceRoot(Self.leaves[0..<size]), "size \(size)")
        }
    }

    @Test("inclusion proofs of every leaf of every tree of size 1…300 verify; moved or cut ones do not")
    func inclusionProofs() throws {
        for size in 1...300 {
            let tree = tree(size)
            let root = try tree.root()
            for index in 0..<size {
                let proof = try tree.inclusionProof(leaf: UInt64(index))
                let leaf = Self.leaves[index]
                #expect(
                    MerkleVerifier.verifyInclusion(
                        proof: proof, leafIndex: UInt64(index), treeSize: UInt64(size), leafHash: leaf, root: root),
                    "leaf \(index) of \(size)")
                // The same proof says nothing about another leaf, another position or a shorter path.
                if size > 1 {
                    let other = (index + 1) % size
                    let otherProof = try tree.inclusionProof(leaf: UInt64(other))
                    #expect(
                        !MerkleVerifier.verifyInclusion(
                            proof: proof, leafIndex: UInt64(index), treeSize: UInt64(size),
                            leafHash: Self.leaves[other], root: root))
                    #expect(
                        !MerkleVerifier.verifyInclusion(
                            proof: proof, leafIndex: UInt64(other), treeSize: UInt64(size), leafHash: leaf, root: root)
                            || proof == otherProof)
                    #expect(
                        !MerkleVerifier.verifyInclusion(
                            proof: Array(proof.dropLast()), leafIndex: UInt64(index), treeSize: UInt64(size),
                            leafHash: leaf, root: root))
                }
            }
        }
        #expect(throws: MerkleProofError.self) { try tree(5).inclusionProof(leaf: 5) }
    }

    @Test("consistency proofs between every pair of sizes 1…300 verify; a rewritten history does not")
    func consistencyProofs() throws {
        let roots = try (0...300).map { try tree($0).root() }
        var rewrittenLeaves = Self.leaves
        rewrittenLeaves[100] = MerkleHash.leaf([0x42])
        let rewritten = InMemoryMerkleLeaves(leaves: rewrittenLeaves)
        for newSize in 1...300 {
            let tree = tree(newSize)
            for oldSize in 1...newSize {
                let proof = try tree.consistencyProof(from: UInt64(oldSize))
                #expect(
                    MerkleVerifier.verifyConsistency(
                        proof: proof, oldSize: UInt64(oldSize), newSize: UInt64(newSize), oldRoot: roots[oldSize],
                        newRoot: roots[newSize]),
                    "\(oldSize) → \(newSize)")
                // A log that changed leaf 100 after the old checkpoint covered it cannot prove consistency.
                if oldSize > 100 && oldSize < newSize {
                    let forged = MerkleTree(size: UInt64(newSize), source: rewritten)
                    #expect(
                        !MerkleVerifier.verifyConsistency(
                            proof: try forged.consistencyProof(from: UInt64(oldSize)), oldSize: UInt64(oldSize),
                            newSize: UInt64(newSize), oldRoot: roots[oldSize], newRoot: try forged.root()))
                }
            }
        }
        #expect(throws: MerkleProofError.self) { try tree(5).consistencyProof(from: 6) }
    }

    @Test("the Python verifier (tools/merkle) accepts every inclusion and consistency proof of sizes 1…300")
    func independentVerifier() async throws {
        var json = "{\"leafHashes\":[" + Self.leaves.map { "\"\($0.hex)\"" }.joined(separator: ",") + "],"
        json += "\"roots\":[" + (try (0...300).map { "\"\(try tree($0).root().hex)\"" }).joined(separator: ",") + "],"
        var inclusion: [String] = []
        var consistency: [String] = []
        for size in 1...300 {
            let tree = tree(size)
            for index in 0..<size {
                let proof = try tree.inclusionProof(leaf: UInt64(index)).map { "\"\($0.hex)\"" }
                inclusion.append("{\"size\":\(size),\"index\":\(index),\"proof\":[\(proof.joined(separator: ","))]}")
            }
            for oldSize in 1...size {
                let proof = try tree.consistencyProof(from: UInt64(oldSize)).map { "\"\($0.hex)\"" }
                consistency.append(
                    "{\"from\":\(oldSize),\"to\":\(size),\"proof\":[\(proof.joined(separator: ","))]}")
            }
        }
        json +=
            "\"inclusion\":[\(inclusion.joined(separator: ","))],\"consistency\":[\(consistency.joined(separator: ","))]}"
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("merkle-vectors-\(UUID()).json")
        try Data(json.utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("tools/merkle/verify_proof.py")
        let (status, text) = try await Self.runPython(script, ["--vectors", file.path])
        #expect(status == 0, "\(text)")
        #expect(text.contains("verified: 45150 inclusion and 45150 consistency proofs"), "\(text)")
        // And it is a verifier: one flipped bit in one proof node is refused.
        var proof = try tree(300).inclusionProof(leaf: 7)
        proof[2][5] ^= 0x10
        let damaged = """
            {"leafHashes":[\(Self.leaves.map { "\"\($0.hex)\"" }.joined(separator: ","))],
             "roots":[\((try (0...300).map { "\"\(try tree($0).root().hex)\"" }).joined(separator: ","))],
             "inclusion":[{"size":300,"index":7,"proof":[\(proof.map { "\"\($0.hex)\"" }.joined(separator: ","))]}],
             "consistency":[]}
            """
        try Data(damaged.utf8).write(to: file)
        let (refusedStatus, refused) = try await Self.runPython(script, ["--vectors", file.path])
        #expect(refusedStatus == 2 && refused.contains("not verified: inclusion of leaf 7 in size 300"), "\(refused)")
    }

    /// Runs `script` with python3; its exit status and standard output (waited for on a thread of its own).
    static func runPython(_ script: URL, _ arguments: [String]) async throws -> (Int32, String) {
        try await onThreadOfItsOwn {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = ["python3", script.path] + arguments
            let output = Pipe()
            process.standardOutput = output
            let exit = try ChildExit(running: process)
            let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            exit.wait()
            return (process.terminationStatus, text)
        }
    }

    @Test("a flipped byte anywhere in a proof, a leaf or a root fails verification")
    func flippedBytes() throws {
        let tree = tree(237)
        let root = try tree.root()
        let proof = try tree.inclusionProof(leaf: 150)
        for node in proof.indices {
            for byte in [0, 17, 31] {
                var damaged = proof
                damaged[node][byte] ^= 0x01
                #expect(
                    !MerkleVerifier.verifyInclusion(
                        proof: damaged, leafIndex: 150, treeSize: 237, leafHash: Self.leaves[150], root: root))
            }
        }
        var leaf = Self.leaves[150]
        leaf[3] ^= 0x80
        #expect(
            !MerkleVerifier.verifyInclusion(proof: proof, leafIndex: 150, treeSize: 237, leafHash: leaf, root: root))
        var badRoot = root
        badRoot[0] ^= 0x01
        #expect(
            !MerkleVerifier.verifyInclusion(
                proof: proof, leafIndex: 150, treeSize: 237, leafHash: Self.leaves[150], root: badRoot))
        let consistency = try tree.consistencyProof(from: 100)
        let oldRoot = try self.tree(100).root()
        for node in consistency.indices {
            var damaged = consistency
            damaged[node][9] ^= 0x04
            #expect(
                !MerkleVerifier.verifyConsistency(
                    proof: damaged, oldSize: 100, newSize: 237, oldRoot: oldRoot, newRoot: root))
        }
    }

    @Test("a checkpoint note is the C2SP text, signed with Ed25519; the key line round-trips")
    func signedNote() throws {
        let key = Curve25519.Signing.PrivateKey()
        let signer = try NoteSigner(name: "topicledger/shop-prod", key: key)
        let checkpoint = Checkpoint(origin: "topicledger/shop-prod", size: 237, root: try tree(237).root())
        let note = try signer.sign(checkpoint)
        let lines = note.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.count == 6)
        #expect(lines[0] == "topicledger/shop-prod")
        #expect(lines[1] == "237")
        #expect(lines[2] == Data(checkpoint.root).base64EncodedString())
        #expect(lines[3] == "")
        #expect(lines[4].hasPrefix("\u{2014} topicledger/shop-prod "))
        #expect(lines[5] == "")
        let blob = try #require(Data(base64Encoded: String(lines[4].split(separator: " ")[2])))
        #expect(blob.count == 68)
        let expectedKeyHash = Array(
            SHA256.hash(
                data: Array("topicledger/shop-prod\n".utf8) + [0x01] + Array(key.publicKey.rawRepresentation)
            ).prefix(4))
        #expect(Array(blob.prefix(4)) == expectedKeyHash)
        #expect(key.publicKey.isValidSignature(blob.dropFirst(4), for: Data(checkpoint.body.utf8)))

        // Key lines whose base64 holds '+' (about half of them) parse too.
        for _ in 0..<20 {
            let other = try NoteSigner(name: "n", key: Curve25519.Signing.PrivateKey()).verifier
            #expect(NoteVerifier(keyLine: other.keyLine) == other, "\(other.keyLine)")
        }
        let verifier = try #require(NoteVerifier(keyLine: signer.verifier.keyLine))
        #expect(verifier == signer.verifier)
        #expect(signer.verifier.keyLine.hasPrefix("topicledger/shop-prod+\(expectedKeyHash.hex)+"))
        #expect(try verifier.verify(note: note) == checkpoint)
    }

    @Test("a note with a flipped byte, another key's signature or a damaged key line is refused")
    func damagedNotes() throws {
        let signer = try NoteSigner(name: "topicledger/p", key: Curve25519.Signing.PrivateKey())
        let note = try signer.sign(Checkpoint(origin: "topicledger/p", size: 9, root: try tree(9).root()))
        let verifier = signer.verifier
        // Every byte of the text and of the signature matters.
        var bytes = Array(note.utf8)
        for index in [0, 15, 16, 20, bytes.count - 10] {
            bytes = Array(note.utf8)
            bytes[index] ^= 0x01
            #expect(throws: NoteError.self) { try verifier.verify(note: String(decoding: bytes, as: UTF8.self)) }
        }
        let stranger = try NoteSigner(name: "topicledger/p", key: Curve25519.Signing.PrivateKey())
        #expect(throws: NoteError.self) { try stranger.verifier.verify(note: note) }
        var keyLine = Array(verifier.keyLine.utf8)
        keyLine[keyLine.count - 5] ^= 0x01
        #expect(NoteVerifier(keyLine: String(decoding: keyLine, as: UTF8.self)) == nil)
        #expect(throws: NoteError.self) { try NoteSigner(name: "has space", key: Curve25519.Signing.PrivateKey()) }
    }
}

extension [UInt8] {
    var hex: String { Hex.encode(self) }
}
