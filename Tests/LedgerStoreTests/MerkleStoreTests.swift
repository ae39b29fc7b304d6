import Foundation
import LMDBKit
import LedgerCore
import LedgerStore
import LedgerTestSupport
import Testing

@Suite("The Merkle tree over the log, in the store")
struct MerkleStoreTests {
    /// A ledger with a few hundred events from random requests.
    static func filledLedger(_ directory: TemporaryDirectory, requests: Int = 150) async throws -> Ledger {
        let ledger = try openTestLedger(directory)
        var generator = SeededGenerator(seed: 11)
        _ = try await appendAll(RandomHistory().requests(count: requests, using: &generator), to: ledger)
        return ledger
    }

    /// The reference: the tree over the log's chain hashes, held in memory.
    static func reference(_ ledger: Ledger) throws -> (size: UInt64, source: InMemoryMerkleLeaves) {
        try ledger.read { snapshot in
            let head = try snapshot.head().seq
            let leaves = try (1...head).map { MerkleHash.leaf(try snapshot.hash(at: $0) ?? []) }
            return (head, InMemoryMerkleLeaves(leaves: leaves))
        }
    }

    @Test("appends keep the RFC 6962 tree over the chain hashes: roots and proofs of every size agree")
    func appendsKeepTheTree() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try await Self.filledLedger(directory)
        defer { ledger.close() }
        let (head, source) = try Self.reference(ledger)
        #expect(head > 200)
        try ledger.read { snapshot in
            for size in 1...head {
                let stored = try snapshot.merkleTree(size: size)
                let expected = MerkleTree(size: size, source: source)
                #expect(try stored.root() == expected.root(), "size \(size)")
                if size % 37 == 0 || size == head {
                    for leaf in stride(from: 0, to: size, by: 13) {
                        #expect(try stored.inclusionProof(leaf: leaf) == expected.inclusionProof(leaf: leaf))
                    }
                    for old in stride(from: 1, through: size, by: 11) {
                        #expect(try stored.consistencyProof(from: old) == expected.consistencyProof(from: old))
                    }
                }
            }
            #expect(try snapshot.merkleTree().size == head)
            #expect(throws: StoreError.self) { try snapshot.merkleTree(size: head + 1) }
        }
    }

    @Test(
        "a layout-3 (no tree) or layout-4 (level-major keys) ledger gets its tree when a writer opens it; verify catches a damaged node, rebuild mends it",
        arguments: [UInt32(3), 4])
    func upgradeVerifyRebuild(layout: UInt32) async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        do {
            let ledger = try await Self.filledLedger(directory, requests: 80)
            ledger.close()
        }
        // Make it what layout 3 was (no tree), or layout 4 (the same subtrees under `level u8 ‖ index u64`).
        let environment = try LMDBEnvironment(path: directory.path + "/demo-project")
        try environment.write { txn throws in
            let merkle = try txn.openDatabase("merkle")
            var layout4: [(key: PackedBytes, value: [UInt8])] = []
            try txn.withCursor(merkle) { cursor in
                try cursor.forEach { entry in
                    let end = entry.key.loadBigEndianUInt64()
                    let level = entry.key[8]
                    var key = PackedBytes()
                    key.append(level)
                    key.append((end >> UInt64(level)) - 1)
                    layout4.append((key, Array(entry.value)))
                    return true
                }
            }
            #expect(layout4.count >= 8)  // 150+ events: subtrees of 16, 32, 64 and 128 leaves
            try txn.clear(merkle)
            if layout == 4 { for entry in layout4 { try txn.put(merkle, key: entry.key, value: entry.value) } }
            try txn.put(try txn.openDatabase("meta"), key: "layoutVersion", value: layout)
        }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        let (head, source) = try Self.reference(ledger)
        let expectedRoot = try MerkleTree(size: head, source: source).root()
        #expect(try ledger.read { try $0.merkleTree().root() } == expectedRoot)
        #expect(try ledger.verify().isSound)

        // One flipped byte in a stored subtree: verify names the tree; the proofs through it change.
        try environment.write { txn throws in
            let merkle = try txn.openDatabase("merkle")
            var key = PackedBytes()  // the second subtree of 16 leaves: it ends at seq 32
            key.append(UInt64(32))
            key.append(UInt8(4))
            guard var node = try txn.value(in: merkle, forKey: key) else {
                throw MissingNode()
            }
            node[0] ^= 0x01
            try txn.put(merkle, key: key, value: node)
        }
        let report = try ledger.verify()
        #expect(!report.isSound)
        #expect(report.problems.contains { $0.contains("projection merkle differs") }, "\(report.problems)")
        // The root of the whole log reads larger subtrees; the audit path of leaf 0 goes through this one.
        let expectedPath = try MerkleTree(size: head, source: source).inclusionProof(leaf: 0)
        #expect(try ledger.read { try $0.merkleTree().inclusionProof(leaf: 0) } != expectedPath)

        try ledger.rebuildProjections()
        #expect(try ledger.verify().isSound)
        #expect(try ledger.read { try $0.merkleTree().root() } == expectedRoot)
        #expect(try ledger.read { try $0.merkleTree().inclusionProof(leaf: 0) } == expectedPath)
    }
}

private struct MissingNode: Error {}

@Suite("The checkpoint signing key")
struct CheckpointKeyTests {
    @Test("made once with mode 0600, loaded again as the same key; a key others can read is refused")
    func keyFile() throws {
        for _ in 0..<8 {  // random keys: their base64 holds '+' about half the time
            let directory = TemporaryDirectory()
            defer { directory.remove() }
            try FileManager.default.createDirectory(
                atPath: directory.path + "/demo-project", withIntermediateDirectories: true)
            #expect(throws: StoreError.self) {
                try CheckpointKeeper.open(dataDirectory: directory.path, project: .default, create: false)
            }
            let made = try CheckpointKeeper.open(dataDirectory: directory.path, project: .default)
            let path = directory.path + "/demo-project/checkpoint.key"
            let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? NSNumber
            #expect(mode?.intValue == 0o600)
            let loaded = try CheckpointKeeper.open(dataDirectory: directory.path, project: .default, create: false)
            #expect(loaded.signer.verifier == made.signer.verifier)
            #expect(made.origin == "topicledger/demo-project")
            try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: path)
            #expect {
                try CheckpointKeeper.open(dataDirectory: directory.path, project: .default)
            } throws: { error in
                "\(error)".contains("can be read by others")
            }
        }
    }
}
