import Crypto
import LMDBKit
import LedgerCore

/// The RFC 6962 tree over a project's log (docs/event-format.md, "Merkle tree"), kept in the `merkle`
/// database: the hash of every complete, aligned subtree of at least 256 leaves, under
/// `end seq u64 ‖ level u8` (big-endian), where the end seq is the seq of the subtree's last leaf — the
/// event that completes it. Keys therefore grow with the log: every put an append lands on the same
/// rightmost page, one dirty page per commit rather than one per level. Leaf `i` is
/// `SHA-256(0x00 ‖ chain hash of seq i+1)`.
///
/// Subtrees below 256 leaves are not stored: they are computed from the chain hashes in the log (at most
/// 255 reads of 32 bytes, about 0.2 ms), so the tree writes one put every 128 events on average and most
/// commits write no page of `merkle` at all — the pages a commit writes, not the hashing, were the tree's
/// cost on durable appends (layout 5 stored subtrees from 16 leaves: 0.86 of append without the tree at 64
/// writers; layout 6: 0.97). The root of any size and any proof are still O(log n) reads of stored subtrees
/// plus at most 255 reads of the log per level below 256 leaves on its path (docs/performance.md).
enum MerkleStore {
    /// Subtrees of `2^lowestStoredLevel` leaves and more are stored.
    static let lowestStoredLevel = 8

    /// The key of subtree `index` of `2^level` leaves (leaves `index·2^level …`): the seq of its last leaf,
    /// then the level. Wrapping arithmetic: a level or index past any real tree gives a key that is not
    /// there, never a trap.
    static func key(level: Int, index: UInt64) -> PackedBytes {
        var key = PackedBytes()
        key.append(endSeq(level: level, index: index))
        key.append(UInt8(truncatingIfNeeded: level))
        return key
    }

    static func endSeq(level: Int, index: UInt64) -> UInt64 { (index &+ 1) &<< UInt64(truncatingIfNeeded: level) }

    /// Called by the appender after it stored the event at `seq` (leaf `seq - 1`), in the same transaction:
    /// stores the subtrees that leaf completes.
    static func didAppend(seq: UInt64, txn: LMDBTransaction, schema: LedgerSchema) throws {
        guard seq % lowestStoredWidth == 0 else { return }
        let hash = try LedgerMerkleNodes(txn: txn, schema: schema).computed(
            level: lowestStoredLevel, index: seq / lowestStoredWidth - 1)
        try store(lowestSubtree: hash, completedAt: seq, txn: txn, schema: schema)
    }

    /// The hash of the complete subtree over `leaves` (leaf hashes, a power of two of them, at least one).
    static func subtreeHash(leaves: [SHA256Digest]) -> [UInt8] {
        var layer = leaves
        while layer.count > 1 {
            layer = stride(from: 0, to: layer.count, by: 2).map { MerkleHash.node(layer[$0], layer[$0 + 1]) }
        }
        return MerkleHash.bytes(layer[0])
    }

    /// Leaves of the smallest stored subtree.
    static let lowestStoredWidth = UInt64(1) << UInt64(lowestStoredLevel)

    /// Stores `hash`, the smallest stored subtree that the event at `seq` completes (`seq` a multiple of
    /// ``lowestStoredWidth``), and the larger subtrees it completes with the stored ones to its left.
    static func store(lowestSubtree hash: [UInt8], completedAt seq: UInt64, txn: LMDBTransaction, schema: LedgerSchema)
        throws
    {
        let nodes = LedgerMerkleNodes(txn: txn, schema: schema)
        var level = lowestStoredLevel
        var index = seq / lowestStoredWidth - 1
        var hash = hash
        try txn.put(schema.merkle, key: key(level: level, index: index), value: hash)
        while index & 1 == 1 {
            hash = MerkleHash.node(try nodes.subtree(level: level, index: index - 1), hash)
            level += 1
            index >>= 1
            try txn.put(schema.merkle, key: key(level: level, index: index), value: hash)
        }
    }
}

/// The tree's nodes as a read (or write) transaction sees them: stored subtrees from `merkle`, smaller ones
/// computed from the log's chain hashes.
public struct LedgerMerkleNodes: MerkleNodeSource {
    let txn: LMDBTransaction
    let schema: LedgerSchema

    public func subtree(level: Int, index: UInt64) throws -> [UInt8] {
        guard level >= MerkleStore.lowestStoredLevel else { return try computed(level: level, index: index) }
        guard level < 64 else { throw StoreError(.corrupt, "no Merkle subtree at level \(level)") }
        let stored = try txn.withValue(in: schema.merkle, forKey: MerkleStore.key(level: level, index: index)) {
            $0.map { Array($0) }
        }
        guard let stored, stored.count == MerkleHash.size else {
            throw StoreError(
                .corrupt,
                "the Merkle tree has no subtree \(level)/\(index); run `ledger verify`, then `ledger rebuild`")
        }
        return stored
    }

    /// A subtree computed from its leaves' chain hashes (levels below the stored ones, and the stored level
    /// itself when the appender first stores it).
    func computed(level: Int, index: UInt64) throws -> [UInt8] {
        let width = UInt64(1) << UInt64(level)
        let first = index * width + 1
        var layer: [SHA256Digest] = []
        layer.reserveCapacity(Int(width))
        // One cursor walks the leaves' records in order (a search, then a step per record) instead of one
        // search from the root per leaf; each record's key is checked, so a gap in the log is still reported.
        try txn.withCursor(schema.log) { cursor in
            var entry = try cursor.seek(first)
            for seq in first...(first + width - 1) {
                guard let record = entry, record.key.count == 8, record.key.loadBigEndianUInt64() == seq else {
                    throw StoreError(.corrupt, "the log has no event at seq \(seq)")
                }
                layer.append(MerkleHash.leaf(try HashChain.split(record: record.value).hash))
                if seq < first + width - 1 { entry = try cursor.next() }
            }
        }
        return MerkleStore.subtreeHash(leaves: layer)
    }
}

/// Builds the stored subtrees of a whole log in memory, one chain hash at a time in seq order (rebuild,
/// verify and the layout upgrade), keeping the right edge's complete subtrees on a stack.
struct MerkleBuilder {
    /// The right edge: complete subtrees, largest first.
    private var edge: [(level: Int, hash: SHA256Digest)] = []
    /// `stored[l]`: the hashes of the complete subtrees at level `lowestStoredLevel + l`, in order, laid end
    /// to end.
    private(set) var stored: [[UInt8]] = []

    mutating func add(chainHash: UnsafeRawBufferPointer) { add(leaf: MerkleHash.leaf(chainHash)) }

    /// Adds the next leaf, given as its leaf hash.
    mutating func add(leaf: SHA256Digest) {
        var level = 0
        var hash = leaf
        while let last = edge.last, last.level == level {
            edge.removeLast()
            hash = MerkleHash.node(last.hash, hash)
            level += 1
            if level >= MerkleStore.lowestStoredLevel {
                let row = level - MerkleStore.lowestStoredLevel
                while stored.count <= row { stored.append([]) }
                hash.withUnsafeBytes { stored[row].append(contentsOf: $0) }
            }
        }
        edge.append((level, hash))
    }

    /// Calls `body` with every stored subtree in key order (end seq, then level).
    func forEachStored(_ body: (_ key: PackedBytes, _ hash: ArraySlice<UInt8>) throws -> Void) rethrows {
        var entries: [(end: UInt64, row: Int, index: Int)] = []
        entries.reserveCapacity(stored.reduce(0) { $0 + $1.count / MerkleHash.size })
        for (row, hashes) in stored.enumerated() {
            for index in 0..<(hashes.count / MerkleHash.size) {
                let level = MerkleStore.lowestStoredLevel + row
                entries.append((MerkleStore.endSeq(level: level, index: UInt64(index)), row, index))
            }
        }
        entries.sort { ($0.end, $0.row) < ($1.end, $1.row) }
        for entry in entries {
            let start = entry.index * MerkleHash.size
            try body(
                MerkleStore.key(level: MerkleStore.lowestStoredLevel + entry.row, index: UInt64(entry.index)),
                stored[entry.row][start..<start + MerkleHash.size])
        }
    }
}
