import LedgerCore

/// Consecutive stored log records of one ledger — each `hash ‖ encodedEvent`, exactly as in its `log` — and
/// the chain hash the first one follows: what a leader replicates of a group commit, and what a follower
/// applies (``Ledger/applyReplicated(_:)``).
public struct ReplicatedBlock: Sendable, Equatable {
    /// The seq of the first record.
    public var firstSeq: UInt64
    /// The chain hash the first record follows (32 bytes; ``HashChain/genesis`` before seq 1).
    public var previousHash: [UInt8]
    /// The records, of seqs `firstSeq…`.
    public var records: [[UInt8]]

    public init(firstSeq: UInt64, previousHash: [UInt8], records: [[UInt8]]) {
        self.firstSeq = firstSeq
        self.previousHash = previousHash
        self.records = records
    }

    /// The seq of the last record (`firstSeq - 1` when there is none).
    public var lastSeq: UInt64 { firstSeq &+ UInt64(records.count) &- 1 }

    /// The chain hash of the last record (`previousHash` when there is none).
    public var lastHash: [UInt8] {
        guard let last = records.last, last.count > HashChain.hashSize else { return previousHash }
        return Array(last[..<HashChain.hashSize])
    }

    /// How many bytes its records hold.
    public var byteCount: Int { records.reduce(0) { $0 + $1.count } }

    /// The block cut into parts of at most `maximumBytes` of records each (at least one record a part), in
    /// order, each following the one before.
    public func split(maximumBytes: Int) -> [ReplicatedBlock] {
        var parts: [ReplicatedBlock] = []
        var current = ReplicatedBlock(firstSeq: firstSeq, previousHash: previousHash, records: [])
        var bytes = 0
        for record in records {
            if !current.records.isEmpty && bytes + record.count > maximumBytes {
                parts.append(current)
                current = ReplicatedBlock(
                    firstSeq: current.lastSeq + 1, previousHash: current.lastHash, records: [])
                bytes = 0
            }
            current.records.append(record)
            bytes += record.count
        }
        parts.append(current)
        return parts
    }
}
