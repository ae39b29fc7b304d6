import Foundation
import LMDBKit
import LedgerCore

/// The proofs an auditor checks alone (docs/compliance.md): a message's `sent` and `audience` events with
/// their inclusion proofs against a signed checkpoint, and consistency proofs between tree sizes — built
/// from a snapshot, checked with nothing but a verifier key.
public enum LedgerProofs {
    /// `{"checkpoint": note, "messageId": "ID", "entries": [{"kind", "seq", "leafIndex", "event", "prevHash",
    /// "hash", "inclusionProof"}, …]}` for `messageID`'s `sent` event and (once recorded) its `audience`
    /// event, against `note` — a signed checkpoint of a tree of `size` that includes them. Nil when the
    /// project has no such message.
    public static func messageProof(
        _ messageID: UInt64, in snapshot: LedgerSnapshot, checkpoint note: String, size: UInt64
    ) throws -> [String: Any]? {
        guard let message = try snapshot.message(messageID) else { return nil }
        let tree = try snapshot.merkleTree(size: size)
        var entries: [[String: Any]] = []
        let events: [(kind: String, seq: UInt64?)] = [("sent", message.sendSeq), ("audience", message.audienceSeq)]
        for (kind, seq) in events {
            guard let seq, seq <= size else { continue }
            guard let stored = try snapshot.storedEvent(at: seq), let previous = try snapshot.hash(at: seq - 1) else {
                throw StoreError(.corrupt, "the log has no event at seq \(seq)")
            }
            entries.append([
                "kind": kind, "seq": seq, "leafIndex": seq - 1,
                "event": Data(stored.encoded).base64EncodedString(), "prevHash": Hex.encode(previous),
                "hash": Hex.encode(stored.hash),
                "inclusionProof": try tree.inclusionProof(leaf: seq - 1).map { Data($0).base64EncodedString() },
            ])
        }
        return ["checkpoint": note, "messageId": String(messageID), "entries": entries]
    }

    /// `{"from": M, "to": N, "fromRoot", "toRoot", "proof": […]}` (RFC 9162 §2.1.4, base64 hashes).
    public static func consistencyProof(from old: UInt64, to new: UInt64, in snapshot: LedgerSnapshot) throws
        -> [String: Any]
    {
        guard old <= new else { throw StoreError(.invalidArgument, "--from \(old) is larger than --to \(new)") }
        let tree = try snapshot.merkleTree(size: new)
        return [
            "from": old, "to": new, "fromRoot": Data(try snapshot.merkleTree(size: old).root()).base64EncodedString(),
            "toRoot": Data(try tree.root()).base64EncodedString(),
            "proof": try tree.consistencyProof(from: old).map { Data($0).base64EncodedString() },
        ]
    }

    /// Checks a proof document (either kind) with `key` alone: the checkpoint's signature; each event's bytes
    /// against its chain hash, its decoded kind, seq and message; its inclusion in the checkpoint's tree; or
    /// the consistency of two roots. Returns what was shown, or throws why not.
    public static func verify(_ document: [String: Any], key: NoteVerifier) throws(ProofRefusal) -> String {
        if let entries = document["entries"] { return try verifyMessageProof(document, entries, key: key) }
        guard let old = uint(document["from"]), let new = uint(document["to"]),
            let oldRoot = base64(document["fromRoot"]), let newRoot = base64(document["toRoot"]),
            let proof = (document["proof"] as? [Any])?.map(base64), !proof.contains(where: { $0 == nil })
        else { throw ProofRefusal("the document is neither a message proof nor a consistency proof") }
        guard
            MerkleVerifier.verifyConsistency(
                proof: proof.compactMap { $0 }, oldSize: old, newSize: new, oldRoot: oldRoot, newRoot: newRoot)
        else { throw ProofRefusal("the consistency proof does not lead from the tree of \(old) to that of \(new)") }
        return "the tree of size \(old) is a prefix of the tree of size \(new)"
    }

    private static func verifyMessageProof(_ document: [String: Any], _ entries: Any, key: NoteVerifier)
        throws(ProofRefusal) -> String
    {
        guard let note = document["checkpoint"] as? String, let entries = entries as? [[String: Any]],
            let messageID = (document["messageId"] as? String).flatMap(UInt64.init)
        else { throw ProofRefusal("a message proof has a checkpoint, a messageId and entries") }
        let checkpoint: Checkpoint
        do { checkpoint = try key.verify(note: note) } catch { throw ProofRefusal("the checkpoint: \(error)") }
        guard entries.first?["kind"] as? String == "sent" else { throw ProofRefusal("the first entry is the send") }
        for entry in entries {
            guard let kind = entry["kind"] as? String, let seq = uint(entry["seq"]), seq >= 1,
                uint(entry["leafIndex"]) == seq - 1, let event = base64(entry["event"]),
                let previous = hexBytes(entry["prevHash"]), let hash = hexBytes(entry["hash"]),
                let proof = (entry["inclusionProof"] as? [Any])?.map(base64), !proof.contains(where: { $0 == nil })
            else { throw ProofRefusal("an entry is malformed") }
            let computed = event.withUnsafeBytes { HashChain.hash(previous: previous, encodedEvent: $0) }
            guard computed == hash else { throw ProofRefusal("the \(kind) event does not hash to its chain hash") }
            let decoded: LedgerEvent
            do { decoded = try EventCodec.decode(event) } catch {
                throw ProofRefusal("the \(kind) event does not decode: \(error)")
            }
            let matches: Bool
            switch decoded.body {
            case .sent(let sent): matches = kind == "sent" && sent.messageID == messageID
            case .audience(let audience): matches = kind == "audience" && audience.messageID == messageID
            default: matches = false
            }
            guard matches, decoded.seq == seq else {
                throw ProofRefusal("the event at seq \(seq) is not the \(kind) of message \(messageID)")
            }
            guard
                MerkleVerifier.verifyInclusion(
                    proof: proof.compactMap { $0 }, leafIndex: seq - 1, treeSize: checkpoint.size,
                    leafHash: MerkleHash.leaf(hash), root: checkpoint.root)
            else { throw ProofRefusal("the \(kind) event at seq \(seq) is not in the checkpoint's tree") }
        }
        return
            "message \(messageID): \(entries.count) events included in \(checkpoint.origin) at size \(checkpoint.size)"
    }

    private static func hexBytes(_ value: Any?) -> [UInt8]? {
        (value as? String).flatMap(Hex.decode).flatMap { $0.count == HashChain.hashSize ? $0 : nil }
    }

    private static func base64(_ value: Any?) -> [UInt8]? {
        (value as? String).flatMap { Data(base64Encoded: $0) }.map(Array.init)
    }

    private static func uint(_ value: Any?) -> UInt64? {
        guard let number = value as? Int, number >= 0 else { return nil }
        return UInt64(number)
    }
}

/// Why a proof was not accepted.
public struct ProofRefusal: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

extension LedgerSnapshot {
    /// The event at `seq` as stored: its chain hash and its encoded bytes (what the hash covers after the
    /// previous hash).
    public func storedEvent(at seq: UInt64) throws -> (hash: [UInt8], encoded: [UInt8])? {
        try txn.withValue(in: schema.log, forKey: seq) { record in
            try record.map { record in
                let parts = try HashChain.split(record: record)
                return (Array(parts.hash), Array(parts.encodedEvent))
            }
        }
    }
}
