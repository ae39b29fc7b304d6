import Foundation
import LedgerCore
import LedgerStore
import SwiftProtobuf

/// A part of a group commit as etcd holds it, decoded.
struct StoredBlock: Sendable {
    var block: ReplicatedBlock
    /// The last seq of the commit the part belongs to: it is whole when a part ends there.
    var commitLastSeq: UInt64
    var leader: String

    init(block: ReplicatedBlock, commitLastSeq: UInt64, leader: String) {
        self.block = block
        self.commitLastSeq = commitLastSeq
        self.leader = leader
    }

    /// Decodes an etcd value.
    ///
    /// - Throws: ``EtcdError`` when the value is not a block.
    init(decoding value: Data) throws {
        let message: Topicledger_Cluster_ReplicationBlock
        do {
            message = try Topicledger_Cluster_ReplicationBlock(serializedBytes: value)
        } catch {
            throw EtcdError("a replicated block cannot be decoded: \(error)")
        }
        guard message.previousHash.count == HashChain.hashSize, !message.records.isEmpty,
            message.firstSeq >= 1, message.firstSeq <= UInt64.max - UInt64(message.records.count),
            message.commitLastSeq >= message.firstSeq + UInt64(message.records.count) - 1
        else {
            throw EtcdError("a replicated block is malformed (seq \(message.firstSeq))")
        }
        block = ReplicatedBlock(
            firstSeq: message.firstSeq, previousHash: Array(message.previousHash),
            records: message.records.map { Array($0) })
        commitLastSeq = message.commitLastSeq
        leader = message.leader
    }

    /// The commit `parts` make up — consecutive parts of one commit, in order — once the last is among them;
    /// `nil` while it is not.
    static func commit(of parts: [StoredBlock]) -> ReplicatedBlock? {
        guard let first = parts.first, let last = parts.last, last.block.lastSeq == last.commitLastSeq else {
            return nil
        }
        return ReplicatedBlock(
            firstSeq: first.block.firstSeq, previousHash: first.block.previousHash,
            records: parts.flatMap(\.block.records))
    }

    /// The etcd value.
    func encoded() throws -> [UInt8] {
        var message = Topicledger_Cluster_ReplicationBlock()
        message.firstSeq = block.firstSeq
        message.previousHash = Data(block.previousHash)
        message.records = block.records.map { Data($0) }
        message.commitLastSeq = commitLastSeq
        message.leader = leader
        return try message.serializedBytes()
    }
}

/// A position in a project's log: a seq and its chain hash — the tail of the replicated log in etcd (the last
/// committed seq), or how far a replica has applied it.
public struct ReplicationTail: Sendable, Equatable, CustomStringConvertible {
    public var seq: UInt64
    public var hash: [UInt8]

    public init(seq: UInt64, hash: [UInt8]) {
        self.seq = seq
        self.hash = hash
    }

    /// The etcd value: `seq hexHash` (text, so that a transaction can compare it byte for byte).
    var encoded: [UInt8] { Array("\(seq) \(hash.hexString)".utf8) }

    init(decoding value: Data) throws {
        let parts = String(decoding: value, as: UTF8.self).split(separator: " ")
        // A seq of UInt64.max could never be followed (its next seq is computed).
        guard parts.count == 2, let seq = UInt64(parts[0]), seq < UInt64.max, let hash = Hex.decode(parts[1]),
            hash.count == HashChain.hashSize
        else {
            throw EtcdError("a replication tail cannot be decoded")
        }
        self.seq = seq
        self.hash = hash
    }

    public var description: String { "\(seq) \(hash.hexString.prefix(16))…" }
}
