import Foundation
import LMDBKit
import LedgerCore
import LedgerStore
import LedgerTestSupport
import Testing
import LedgerQueries

@Suite("The Merkle tree over the log, in the store", .offThePool)
struct MerkleStoreTests {
    /// A ledger of at least `events` events from random operations (stored subtrees start at 256 leaves).
    static func filledLedger(_ directory: TemporaryDirectory, events: UInt64 = 1300) async throws -> Ledger {
        let ledger = try openTestLedger(directory)
        var generator = SeededGenerator(seed: 11)
        let history = RandomHistory(tokenCount: 40, topicCount: 8)
        var request = 0
        while try ledger.readLog({ try $0.head().seq }) < events {
            request += 1
            let operations = (0..<200).map { _ in history.operation(using: &generator) }
            _ = try await ledger.append(
                WriteRequest(actor: "test", requestID: "fill-\(request)", operations: operations))
        }
        ledger.waitForAudiences()
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
        #expect(head > 1024)  // stored subtrees of 256, 512 and 1024 leaves
        try ledger.read { snapshot in
            for size in 1...head {
                let stored = try snapshot.merkleTree(size: size)
                let expected = MerkleTree(size: size, source: source)
                #expect(try stored.root() == expected.root(), "size \(size)")
                if size % 97 == 0 || [255, 256, 257, 511, 512, 1024, head].contains(size) {
                    for leaf in stride(from: 0, to: size, by: 29) {
                        #expect(try stored.inclusionProof(leaf: leaf) == expected.inclusionProof(leaf: leaf))
                    }
                    for old in stride(from: 1, through: size, by: 31) {
                        #expect(try stored.consistencyProof(from: old) == expected.consistencyProof(from: old))
                    }
                }
            }
            #expect(try snapshot.merkleTree().size == head)
            #expect(throws: StoreError.self) { try snapshot.merkleTree(size: head + 1) }
        }
    }

    @Test(
        "a layout-3 (no tree), layout-4 (level-major keys) or layout-5 (subtrees from 16 leaves) ledger gets its tree when a writer opens it; verify catches a damaged node, rebuild mends it",
        arguments: [UInt32(3), 4, 5])
    func upgradeVerifyRebuild(layout: UInt32) async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let (head, source): (UInt64, InMemoryMerkleLeaves)
        do {
            let ledger = try await Self.filledLedger(directory, events: 600)
            (head, source) = try Self.reference(ledger)
            ledger.close()
        }
        // Make it what an older layout kept: layouts 4 and 5 stored every complete subtree from 16 leaves,
        // layout 4 under `level u8 ‖ index u64`, layout 5 under `end seq u64 ‖ level u8`; layout 3 none.
        let older = try (4...9).flatMap { level in
            try (0..<(head >> UInt64(level))).map { index in
                (level: level, index: index, hash: try source.subtree(level: level, index: index))
            }
        }
        #expect(older.count >= 40)  // 600+ events: subtrees of 16 … 512 leaves
        let environment = try LMDBEnvironment(path: directory.path + "/demo-project")
        try environment.write { txn throws in
            let merkle = try txn.openDatabase("merkle")
            try txn.clear(merkle)
            for node in older where layout >= 4 {
                var key = PackedBytes()
                if layout == 4 {
                    key.append(UInt8(node.level))
                    key.append(node.index)
                } else {
                    key.append((node.index + 1) << UInt64(node.level))
                    key.append(UInt8(node.level))
                }
                try txn.put(merkle, key: key, value: node.hash)
            }
            try txn.put(try txn.openDatabase("meta"), key: "layoutVersion", value: layout)
        }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        let expectedRoot = try MerkleTree(size: head, source: source).root()
        #expect(try ledger.read { try $0.merkleTree().root() } == expectedRoot)
        #expect(try ledger.verify().isSound)

        // One flipped byte in a stored subtree: verify names the tree; the proofs through it change.
        try environment.write { txn throws in
            let merkle = try txn.openDatabase("merkle")
            var key = PackedBytes()  // the second subtree of 256 leaves: it ends at seq 512
            key.append(UInt64(512))
            key.append(UInt8(8))
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

@Suite("The checkpoint signing key", .offThePool)
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

@Suite("The checkpoint signing key, made at once by many", .offThePool)
struct CheckpointKeyRaceTests {
    @Test(
        "processes or threads that make the key at the same time all end up with the one key, and no temporary file is left"
    )
    func concurrentCreation() async throws {
        for _ in 0..<5 {
            let directory = TemporaryDirectory()
            defer { directory.remove() }
            try FileManager.default.createDirectory(
                atPath: directory.path + "/demo-project", withIntermediateDirectories: true)
            let path = directory.path
            let keys = try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<8 {
                    group.addTask {
                        try CheckpointKeeper.open(dataDirectory: path, project: .default).signer.verifier.keyLine
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(Set(keys).count == 1)
            #expect(
                try FileManager.default.contentsOfDirectory(atPath: path + "/demo-project").sorted() == [
                    "checkpoint.key"
                ])
        }
    }
}

@Suite("Kept checkpoints", .offThePool)
struct KeptCheckpointTests {
    @Test(
        "a last line cut short (a crash or a full disk mid-write) is not a kept checkpoint, and the next one starts on its own line"
    )
    func tornTail() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        _ = try await ledger.append(
            WriteRequest(
                actor: "test", requestID: "r",
                operations: [.register(try RegistrationToken("device:APA91b"), platform: nil, appID: nil)]))
        let keeper = try CheckpointKeeper.open(dataDirectory: directory.path, project: .default)
        let first = try ledger.read { try keeper.sign($0) }
        let path = directory.path + "/demo-project/checkpoints.jsonl"
        let whole = try Data(contentsOf: URL(fileURLWithPath: path))
        // A second line torn after a few bytes, as a crash would leave it.
        let handle = try #require(FileHandle(forWritingAtPath: path))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(#"{"note":"topicledger/demo"#.utf8))
        try handle.close()

        #expect(try keeper.kept().map(\.note) == [first.note])
        let second = try ledger.read { try keeper.sign($0) }
        #expect(try keeper.kept().map(\.note) == [first.note, second.note])
        let text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(text.hasPrefix(String(decoding: whole, as: UTF8.self)))
        #expect(text.split(separator: "\n").count == 2 && text.hasSuffix("\n"))

        // A damaged line that is not the last is still refused.
        try Data(("garbage\n" + text).utf8).write(to: URL(fileURLWithPath: path))
        #expect(throws: StoreError.self) { try keeper.kept() }
    }

    @Test("the last cosigned checkpoint is read from the end of a file larger than the tail read, a torn line skipped")
    func lastCosigned() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        try FileManager.default.createDirectory(
            atPath: directory.path + "/demo-project", withIntermediateDirectories: true)
        let keeper = try CheckpointKeeper.open(dataDirectory: directory.path, project: .default)
        #expect(try keeper.lastCosigned() == nil)
        // 3,000 lines of about 400 bytes: the file is past the 1 MiB tail read, which starts mid-line.
        let filler = String(repeating: "x", count: 380)
        for size in 1...3000 { try keeper.keepCosigned(size: UInt64(size), note: "note \(size) \(filler)") }
        let path = directory.path + "/demo-project/cosigned.jsonl"
        #expect(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int ?? 0 > 1 << 20)
        #expect(try keeper.lastCosigned()?.size == 3000)
        #expect(try keeper.lastCosigned()?.note == "note 3000 \(filler)")
        let handle = try #require(FileHandle(forWritingAtPath: path))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(#"{"note":"torn"#.utf8))
        try handle.close()
        #expect(try keeper.lastCosigned()?.size == 3000)
        #expect(try keeper.cosigned().count == 3000)
    }
}
