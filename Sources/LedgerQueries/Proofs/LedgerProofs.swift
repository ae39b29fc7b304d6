import LedgerStore
import Foundation
import LedgerCore

/// The proofs an auditor checks alone (docs/compliance.md): a message's `sent` and `audience` events with
/// their inclusion proofs against a signed checkpoint, and consistency proofs between tree sizes — built
/// from a snapshot, checked with nothing but a verifier key.
public enum LedgerProofs {
    /// `{"checkpoint": note, "messageId": "ID", "entries": [{"kind", "seq", "leafIndex", "event", "prevHash",
    /// "hash", "inclusionProof"}, …]}`: a message's `sent` and (once recorded) `audience` events with their
    /// inclusion proofs against a signed checkpoint. Events and proof hashes in base64, chain hashes in hex.
    public struct MessageProof: Codable, Sendable {
        public struct Entry: Codable, Sendable {
            public let kind: String
            public let seq: UInt64
            public let leafIndex: UInt64
            public let event: String
            public let prevHash: String
            public let hash: String
            public let inclusionProof: [String]
        }
        public let checkpoint: String
        public let messageId: String
        public let entries: [Entry]
    }

    /// `{"from": M, "to": N, "fromRoot", "toRoot", "proof": […]}` (RFC 9162 §2.1.4, base64 hashes), and
    /// `toCheckpoint`, the signed (and, with witnesses, cosigned) checkpoint of size N, when the server has one.
    public struct ConsistencyProof: Codable, Sendable {
        public let from: UInt64
        public let to: UInt64
        public let fromRoot: String
        public let toRoot: String
        public let proof: [String]
        public var toCheckpoint: String?
    }

    /// `messageID`'s proof against `note` — a signed checkpoint of a tree of `size` that includes its
    /// events. Nil when the project has no such message.
    public static func messageProof(
        _ messageID: UInt64, in snapshot: LedgerSnapshot, checkpoint note: String, size: UInt64
    ) throws -> MessageProof? {
        guard let message = try snapshot.message(messageID) else { return nil }
        let tree = try snapshot.merkleTree(size: size)
        var entries: [MessageProof.Entry] = []
        let events: [(kind: String, seq: UInt64?)] = [("sent", message.sendSeq), ("audience", message.audienceSeq)]
        for (kind, seq) in events {
            guard let seq, seq <= size else { continue }
            guard let stored = try snapshot.storedEvent(at: seq), let previous = try snapshot.hash(at: seq - 1) else {
                throw StoreError(.corrupt, "the log has no event at seq \(seq)")
            }
            entries.append(
                MessageProof.Entry(
                    kind: kind, seq: seq, leafIndex: seq - 1, event: Data(stored.encoded).base64EncodedString(),
                    prevHash: Hex.encode(previous), hash: Hex.encode(stored.hash),
                    inclusionProof: try tree.inclusionProof(leaf: seq - 1).map { Data($0).base64EncodedString() }))
        }
        return MessageProof(checkpoint: note, messageId: String(messageID), entries: entries)
    }

    /// The consistency proof between the trees of sizes `old` and `new`.
    public static func consistencyProof(from old: UInt64, to new: UInt64, in snapshot: LedgerSnapshot) throws
        -> ConsistencyProof
    {
        guard old <= new else { throw StoreError(.invalidArgument, "--from \(old) is larger than --to \(new)") }
        let tree = try snapshot.merkleTree(size: new)
        return ConsistencyProof(
            from: old, to: new, fromRoot: Data(try snapshot.merkleTree(size: old).root()).base64EncodedString(),
            toRoot: Data(try tree.root()).base64EncodedString(),
            proof: try tree.consistencyProof(from: old).map { Data($0).base64EncodedString() }, toCheckpoint: nil)
    }

    /// Checks a proof document (either kind, as JSON) with `key` alone: the checkpoint's signature; each
    /// event's bytes against its chain hash, its decoded kind, seq and message; its inclusion in the
    /// checkpoint's tree; or the consistency of two roots. Returns what was shown, or throws why not.
    ///
    /// With `witnesses` and a `quorum` above 0, the proof's checkpoint must also carry valid cosignatures
    /// (C2SP tlog-cosignature) from at least `quorum` of those keys; a consistency proof must then carry its
    /// `toCheckpoint`.
    public static func verify(
        _ json: Data, key: NoteVerifier, witnesses: [CosignatureVerifier] = [], quorum: Int = 0
    ) throws(ProofRefusal) -> String {
        let decoder = JSONDecoder()
        let document: Document
        do {
            document = try decoder.decode(Document.self, from: json)
        } catch let refusal as ProofRefusal {
            throw refusal
        } catch {
            throw ProofRefusal("the document is not JSON")
        }
        let shown: String
        let note: String?
        switch document {
        case .message(let proof):
            shown = try verify(proof, key: key)
            note = proof.checkpoint
        case .consistency(let proof):
            shown = try verify(proof)
            note = proof.toCheckpoint
            if let note {
                let checkpoint: Checkpoint
                do { checkpoint = try key.verify(note: note) } catch {
                    throw ProofRefusal("the checkpoint: \(error)")
                }
                guard checkpoint.size == proof.to, Data(checkpoint.root).base64EncodedString() == proof.toRoot else {
                    throw ProofRefusal("the checkpoint is not of the proof's newer tree")
                }
            }
        }
        guard quorum > 0 else { return shown }
        guard let note, let signed = try? SignedNote(parsing: note) else {
            throw ProofRefusal("the proof carries no checkpoint to count cosignatures on")
        }
        let count = CosignatureVerifier.count(witnesses, on: signed)
        guard count >= quorum else {
            throw ProofRefusal(
                "the checkpoint carries \(count) valid cosignatures of the \(Set(witnesses).count) witnesses given, "
                    + "fewer than the quorum of \(quorum)")
        }
        return shown + "; cosigned by \(count) of \(Set(witnesses).count) witnesses (quorum \(quorum))"
    }

    /// A document of either kind: one with `entries` is a message proof.
    private enum Document: Decodable {
        case message(MessageProof)
        case consistency(ConsistencyProof)

        private struct Key: CodingKey {
            let stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }

        init(from decoder: any Decoder) throws {
            guard let members = try? decoder.container(keyedBy: Key.self) else {
                throw ProofRefusal("the document is neither a message proof nor a consistency proof")
            }
            if members.contains(Key(stringValue: "entries")) {
                // Entries one by one, so that a bad entry and a bad document are told apart.
                guard let lenient = try? Lenient(from: decoder) else {
                    throw ProofRefusal("a message proof has a checkpoint, a messageId and entries")
                }
                let entries = lenient.entries.compactMap(\.entry)
                guard entries.count == lenient.entries.count else { throw ProofRefusal("an entry is malformed") }
                self = .message(
                    MessageProof(checkpoint: lenient.checkpoint, messageId: lenient.messageId, entries: entries))
            } else {
                do {
                    self = .consistency(try ConsistencyProof(from: decoder))
                } catch {
                    throw ProofRefusal("the document is neither a message proof nor a consistency proof")
                }
            }
        }

        /// A message proof whose entries may each fail to decode.
        private struct Lenient: Decodable {
            struct MaybeEntry: Decodable {
                let entry: MessageProof.Entry?
                init(from decoder: any Decoder) throws { entry = try? MessageProof.Entry(from: decoder) }
            }
            let checkpoint: String
            let messageId: String
            let entries: [MaybeEntry]
        }
    }

    private static func verify(_ proof: ConsistencyProof) throws(ProofRefusal) -> String {
        let hashes = proof.proof.map(base64)
        guard let oldRoot = base64(proof.fromRoot), let newRoot = base64(proof.toRoot),
            !hashes.contains(where: { $0 == nil })
        else { throw ProofRefusal("the document is neither a message proof nor a consistency proof") }
        guard
            MerkleVerifier.verifyConsistency(
                proof: hashes.compactMap { $0 }, oldSize: proof.from, newSize: proof.to, oldRoot: oldRoot,
                newRoot: newRoot)
        else {
            throw ProofRefusal(
                "the consistency proof does not lead from the tree of \(proof.from) to that of \(proof.to)")
        }
        return "the tree of size \(proof.from) is a prefix of the tree of size \(proof.to)"
    }

    private static func verify(_ proof: MessageProof, key: NoteVerifier) throws(ProofRefusal) -> String {
        guard let messageID = UInt64(proof.messageId) else {
            throw ProofRefusal("a message proof has a checkpoint, a messageId and entries")
        }
        let checkpoint: Checkpoint
        do { checkpoint = try key.verify(note: proof.checkpoint) } catch {
            throw ProofRefusal("the checkpoint: \(error)")
        }
        guard proof.entries.first?.kind == "sent" else { throw ProofRefusal("the first entry is the send") }
        var erased = 0
        for entry in proof.entries {
            let kind = entry.kind
            let seq = entry.seq
            let hashes = entry.inclusionProof.map(base64)
            guard seq >= 1, entry.leafIndex == seq - 1, let event = base64(entry.event),
                let previous = hexBytes(entry.prevHash), let hash = hexBytes(entry.hash),
                !hashes.contains(where: { $0 == nil })
            else { throw ProofRefusal("an entry is malformed") }
            let decoded: LedgerEvent
            do { decoded = try EventCodec.decode(event) } catch {
                throw ProofRefusal("the \(kind) event does not decode: \(error)")
            }
            // An event an erasure rewrote before the ledger sealed (encoding version 2) keeps the hash of the bytes
            // it replaced: the tree vouches for that hash, and its bytes are what is left after the erasure. A
            // sealed event hashes to its chain hash through its hashed form, forgotten values or not.
            let computed: [UInt8]?
            do {
                computed = try event.withUnsafeBytes {
                    try HashChain.recomputedHash(previous: previous, encodedEvent: $0, decoded: decoded)
                }
            } catch { throw ProofRefusal("the \(kind) event does not hash to its chain hash") }
            if let computed {
                guard computed == hash else { throw ProofRefusal("the \(kind) event does not hash to its chain hash") }
            } else {
                erased += 1
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
                    proof: hashes.compactMap { $0 }, leafIndex: seq - 1, treeSize: checkpoint.size,
                    leafHash: MerkleHash.leaf(hash), root: checkpoint.root)
            else { throw ProofRefusal("the \(kind) event at seq \(seq) is not in the checkpoint's tree") }
        }
        return
            "message \(messageID): \(proof.entries.count) events included in \(checkpoint.origin) at size \(checkpoint.size)"
            + (erased > 0
                ? " (\(erased) of them rewritten by an erasure: their hashes are in the tree, their bytes no longer give them)"
                : "")
    }

    private static func hexBytes(_ text: String) -> [UInt8]? {
        Hex.decode(text).flatMap { $0.count == HashChain.hashSize ? $0 : nil }
    }

    private static func base64(_ text: String) -> [UInt8]? {
        Data(base64Encoded: text).map(Array.init)
    }
}

/// Why a proof was not accepted.
public struct ProofRefusal: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
