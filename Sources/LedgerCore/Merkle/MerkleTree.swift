import Crypto

/// RFC 6962 §2.1 hashing: a leaf is `SHA-256(0x00 ‖ data)`, an interior node `SHA-256(0x01 ‖ left ‖ right)`,
/// the empty tree `SHA-256()`. A ledger's leaf `i` (0-based) is the event with seq `i + 1`, and its data is
/// that event's chain hash (32 raw bytes).
public enum MerkleHash {
    public static let size = 32

    // Two hashes per appended event (and per event of a rebuild): one-shot hashing of one stack buffer
    // holding the prefix byte and the data (a hasher fed piece by piece cost twice as much), and digests
    // kept as `SHA256Digest` values (inline, no heap) until a caller wants bytes.

    public static func leaf(_ data: some Sequence<UInt8>) -> [UInt8] {
        let digest: SHA256Digest? = data.withContiguousStorageIfAvailable { leaf(UnsafeRawBufferPointer($0)) }
        return bytes(digest ?? Array(data).withUnsafeBytes { leaf($0) })
    }

    public static func node(_ left: [UInt8], _ right: [UInt8]) -> [UInt8] {
        bytes(left.withUnsafeBytes { left in right.withUnsafeBytes { hash(prefix: 0x01, left, $0) } })
    }

    /// `SHA-256(0x00 ‖ data)`.
    public static func leaf(_ data: UnsafeRawBufferPointer) -> SHA256Digest { hash(prefix: 0x00, data) }

    /// `SHA-256(0x01 ‖ left ‖ right)`.
    public static func node(_ left: SHA256Digest, _ right: SHA256Digest) -> SHA256Digest {
        left.withUnsafeBytes { left in right.withUnsafeBytes { hash(prefix: 0x01, left, $0) } }
    }

    public static func bytes(_ digest: SHA256Digest) -> [UInt8] { digest.withUnsafeBytes { Array($0) } }

    /// `SHA-256(prefix ‖ first ‖ second)`.
    private static func hash(
        prefix: UInt8, _ first: UnsafeRawBufferPointer,
        _ second: UnsafeRawBufferPointer = UnsafeRawBufferPointer(
            start: nil, count: 0)
    ) -> SHA256Digest {
        withUnsafeTemporaryAllocation(byteCount: 1 + first.count + second.count, alignment: 1) { buffer in
            buffer[0] = prefix
            UnsafeMutableRawBufferPointer(rebasing: buffer[1...]).copyMemory(from: first)
            UnsafeMutableRawBufferPointer(rebasing: buffer[(1 + first.count)...]).copyMemory(from: second)
            return SHA256.hash(data: UnsafeRawBufferPointer(buffer))
        }
    }

    public static var empty: [UInt8] { Array(SHA256.hash(data: [UInt8]())) }
}

/// Where a tree's hashes come from: the hash of a complete, aligned subtree — the `2^level` leaves
/// starting at `index * 2^level`. A store answers from what it keeps; ``MerkleTree`` asks only for
/// subtrees that lie within the tree's size.
public protocol MerkleNodeSource {
    func subtree(level: Int, index: UInt64) throws -> [UInt8]
}

/// The Merkle Tree Hash of RFC 6962 §2.1 over the first `size` leaves of a source, and the audit paths
/// (inclusion proofs, §2.1.1) and consistency proofs (§2.1.2) of RFC 6962, in RFC 9162 §2.1.3/§2.1.4
/// order. Every subtree the recursion needs is either complete and aligned (one `subtree` call) or the
/// tree's right edge, computed from O(log n) complete ones.
public struct MerkleTree<Source: MerkleNodeSource> {
    public let size: UInt64
    public let source: Source

    public init(size: UInt64, source: Source) {
        self.size = size
        self.source = source
    }

    /// MTH(D[0:size]).
    public func root() throws -> [UInt8] {
        size == 0 ? MerkleHash.empty : try hash(0, size)
    }

    /// The inclusion proof of leaf `index` (0-based, < size): PATH(m, D[n]).
    public func inclusionProof(leaf index: UInt64) throws(MerkleProofError) -> [[UInt8]] {
        guard index < size else { throw .outOfRange("leaf \(index) is not in a tree of size \(size)") }
        return try sourced { try path(index, 0, size) }
    }

    /// The consistency proof between the tree's first `oldSize` leaves and all of them: PROOF(m, D[n]),
    /// empty when `oldSize` is 0 or the size itself.
    public func consistencyProof(from oldSize: UInt64) throws(MerkleProofError) -> [[UInt8]] {
        guard oldSize <= size else {
            throw .outOfRange("a tree of size \(oldSize) is not a prefix of one of size \(size)")
        }
        guard oldSize > 0, oldSize < size else { return [] }
        return try sourced { try subproof(oldSize, 0, size, complete: true) }
    }

    private func sourced(_ body: () throws -> [[UInt8]]) throws(MerkleProofError) -> [[UInt8]] {
        do { return try body() } catch let error as MerkleProofError { throw error } catch {
            throw .source(error)
        }
    }

    /// MTH(D[lo:hi]) for a range the RFC's recursion reaches: `lo` is a multiple of the largest power of two
    /// below `hi - lo` (or of `hi - lo` itself when that is a power of two).
    func hash(_ lo: UInt64, _ hi: UInt64) throws -> [UInt8] {
        let count = hi - lo
        if count & (count - 1) == 0 {
            let level = count.trailingZeroBitCount
            return try source.subtree(level: level, index: lo >> UInt64(level))
        }
        let split = Self.largestPowerOfTwo(below: count)
        return MerkleHash.node(try hash(lo, lo + split), try hash(lo + split, hi))
    }

    private func path(_ m: UInt64, _ lo: UInt64, _ hi: UInt64) throws -> [[UInt8]] {
        let count = hi - lo
        guard count > 1 else { return [] }
        let split = Self.largestPowerOfTwo(below: count)
        if m < split { return try path(m, lo, lo + split) + [try hash(lo + split, hi)] }
        return try path(m - split, lo + split, hi) + [try hash(lo, lo + split)]
    }

    private func subproof(_ m: UInt64, _ lo: UInt64, _ hi: UInt64, complete: Bool) throws -> [[UInt8]] {
        let count = hi - lo
        if m == count { return complete ? [] : [try hash(lo, hi)] }
        let split = Self.largestPowerOfTwo(below: count)
        if m <= split { return try subproof(m, lo, lo + split, complete: complete) + [try hash(lo + split, hi)] }
        return try subproof(m - split, lo + split, hi, complete: false) + [try hash(lo, lo + split)]
    }

    /// The largest power of two strictly below `n` (n ≥ 2).
    static func largestPowerOfTwo(below n: UInt64) -> UInt64 {
        UInt64(1) << UInt64(63 - (n - 1).leadingZeroBitCount)
    }
}

public enum MerkleProofError: Error, CustomStringConvertible {
    /// The proof asked for is not about this tree.
    case outOfRange(String)
    /// The node source failed (a store error).
    case source(any Error)

    public var description: String {
        switch self {
        case .outOfRange(let message): message
        case .source(let error): "reading the tree failed: \(error)"
        }
    }
}

/// Checks proofs with nothing but hashes: RFC 9162 §2.1.3.2 and §2.1.4.2.
public enum MerkleVerifier {
    /// The root an inclusion proof leads to from `leafHash` at `index` in a tree of `size`, or nil when the
    /// proof has the wrong shape for that position.
    public static func root(
        fromInclusionProof proof: [[UInt8]], leafIndex index: UInt64, treeSize size: UInt64, leafHash: [UInt8]
    ) -> [UInt8]? {
        guard index < size else { return nil }
        var fn = index
        var sn = size - 1
        var r = leafHash
        for p in proof {
            guard sn != 0, p.count == MerkleHash.size else { return nil }
            if fn & 1 == 1 || fn == sn {
                r = MerkleHash.node(p, r)
                if fn & 1 == 0 {
                    while fn & 1 == 0 && fn != 0 {
                        fn >>= 1
                        sn >>= 1
                    }
                }
            } else {
                r = MerkleHash.node(r, p)
            }
            fn >>= 1
            sn >>= 1
        }
        return sn == 0 ? r : nil
    }

    public static func verifyInclusion(
        proof: [[UInt8]], leafIndex: UInt64, treeSize: UInt64, leafHash: [UInt8], root: [UInt8]
    ) -> Bool {
        Self.root(fromInclusionProof: proof, leafIndex: leafIndex, treeSize: treeSize, leafHash: leafHash) == root
    }

    /// Whether `proof` shows that the tree of `oldSize` with `oldRoot` is a prefix of the tree of `newSize`
    /// with `newRoot`.
    public static func verifyConsistency(
        proof: [[UInt8]], oldSize: UInt64, newSize: UInt64, oldRoot: [UInt8], newRoot: [UInt8]
    ) -> Bool {
        guard oldSize <= newSize else { return false }
        if oldSize == newSize { return proof.isEmpty && oldRoot == newRoot }
        if oldSize == 0 { return proof.isEmpty }
        guard !proof.isEmpty, proof.allSatisfy({ $0.count == MerkleHash.size }) else { return false }
        var path = proof
        if oldSize & (oldSize - 1) == 0 { path.insert(oldRoot, at: 0) }
        var fn = oldSize - 1
        var sn = newSize - 1
        while fn & 1 == 1 {
            fn >>= 1
            sn >>= 1
        }
        var fr = path[0]
        var sr = path[0]
        for c in path.dropFirst() {
            guard sn != 0 else { return false }
            if fn & 1 == 1 || fn == sn {
                fr = MerkleHash.node(c, fr)
                sr = MerkleHash.node(c, sr)
                if fn & 1 == 0 {
                    while fn & 1 == 0 && fn != 0 {
                        fn >>= 1
                        sn >>= 1
                    }
                }
            } else {
                sr = MerkleHash.node(sr, c)
            }
            fn >>= 1
            sn >>= 1
        }
        return fr == oldRoot && sr == newRoot && sn == 0
    }
}

/// A source over leaf hashes held in memory (tests, small trees): every complete subtree is computed once,
/// when the source is made.
public struct InMemoryMerkleLeaves: MerkleNodeSource, Sendable {
    /// `levels[l][i]`: the hash of the complete subtree of `2^l` leaves starting at `i * 2^l`.
    private var levels: [[[UInt8]]]

    public init(leaves: [[UInt8]]) {
        levels = [leaves]
        while let below = levels.last, below.count > 1 {
            levels.append(stride(from: 0, to: below.count - 1, by: 2).map { MerkleHash.node(below[$0], below[$0 + 1]) })
        }
    }

    public func subtree(level: Int, index: UInt64) throws -> [UInt8] {
        guard level < levels.count, index < UInt64(levels[level].count) else {
            throw MerkleProofError.outOfRange("subtree \(level)/\(index) is past the leaves")
        }
        return levels[level][Int(index)]
    }
}
