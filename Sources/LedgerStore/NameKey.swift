import Crypto
import LMDBKit
import LedgerCore

/// The key under which a name — a registration token (`tokens`) or a topic name (`topicIDs`) — is stored.
///
/// LMDB keys stop at 511 bytes, while FCM allows 900-character topic names and tokens of up to 4096 bytes.
/// A name of at most 511 bytes is its own key (every name an existing ledger holds, so no rewrite is
/// needed, and the `tokens` database stays in the byte order the recipient digest wants); a longer name is
/// stored under `0x00 ‖ SHA-256(name)`. No token or topic byte is `0x00`, so the two forms never meet, and
/// hashed keys sort before every inline one (``isHashed(_:)``; readers that walk the database in order merge
/// them back in — see `LedgerSnapshot.forEachToken`). The full name is always kept in the value's record
/// (`instances`, `topicNames`), which is what a lookup of a hashed key checks against (a collision check).
struct NameKey: LMDBBytes {
    /// The longest name stored as itself: LMDB's key limit (`mdb_env_get_maxkeysize` of Debian's build).
    static let maximumInlineBytes = 511
    static let hashedMarker: UInt8 = 0

    let name: String

    init(_ name: String) { self.name = name }

    /// Whether a name of this many UTF-8 bytes is stored under its hash.
    static func isHashed(byteCount: Int) -> Bool { byteCount > maximumInlineBytes }

    /// Whether a stored key is the hashed form.
    static func isHashed(_ key: UnsafeRawBufferPointer) -> Bool { key.first == hashedMarker }

    var isHashed: Bool { Self.isHashed(byteCount: name.utf8.count) }

    func withLMDBBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        guard isHashed else { return try name.withLMDBBytes(body) }
        return try bytes.withUnsafeBytes(body)
    }

    /// The stored key as bytes.
    var bytes: [UInt8] {
        guard isHashed else { return Array(name.utf8) }
        return [Self.hashedMarker] + Array(SHA256.hash(data: Array(name.utf8)))
    }
}

/// Looks names up under their ``NameKey``, checking a hashed key against the full name kept in the record.
///
/// The one place both the write side (``LMDBProjection``) and the read side (``LedgerSnapshot``) resolve a
/// token or topic name to its id.
enum NameIndex {
    /// The id a name maps to: exactly four bytes. A value of another length (a damaged or edited file) is
    /// refused rather than read zero-padded, which would name another instance or topic and have the writer
    /// fold an event into its projections.
    private static func storedID(_ value: UnsafeRawBufferPointer, in database: String) throws -> UInt32 {
        guard value.count == 4 else {
            throw StoreError(
                .corrupt,
                "a value of \(database) is \(value.count) bytes where an id's 4 belong; run `ledger verify`, then "
                    + "`ledger rebuild`")
        }
        return value.loadBigEndianUInt32()
    }

    /// The instance id of `token`, registered now or in the past.
    ///
    /// - Throws: `.corrupt` when a hashed key belongs to another token (a SHA-256 collision), or the stored id
    ///   is not four bytes.
    static func instanceID(of token: RegistrationToken, txn: LMDBTransaction, schema: LedgerSchema) throws
        -> InstanceID?
    {
        let key = NameKey(token.rawValue)
        guard
            let id = try txn.withValue(
                in: schema.tokens, forKey: key, { try $0.map { try storedID($0, in: "tokens") } })
        else { return nil }
        if key.isHashed {
            let stored = try txn.withValue(in: schema.instances, forKey: id) { try $0.map(InstanceRecord.token(in:)) }
            guard stored == token.rawValue else {
                throw StoreError(.corrupt, "two registration tokens share the SHA-256 of their key")
            }
        }
        return id
    }

    /// The id of `topic`, if it was ever subscribed to.
    ///
    /// - Throws: `.corrupt` when a hashed key belongs to another name (a SHA-256 collision), or the stored id
    ///   is not four bytes.
    static func topicID(of topic: TopicName, txn: LMDBTransaction, schema: LedgerSchema) throws -> TopicID? {
        let key = NameKey(topic.rawValue)
        guard
            let id = try txn.withValue(
                in: schema.topicIDs, forKey: key, { try $0.map { try storedID($0, in: "topicIDs") } })
        else { return nil }
        if key.isHashed {
            let matches = try txn.withValue(in: schema.topicNames, forKey: id) {
                $0?.elementsEqual(topic.rawValue.utf8) ?? false
            }
            guard matches else { throw StoreError(.corrupt, "two topic names share the SHA-256 of their key") }
        }
        return id
    }
}
