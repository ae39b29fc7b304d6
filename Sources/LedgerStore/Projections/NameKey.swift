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

    /// The instance ids of `tokens` (``instanceID(of:txn:schema:)`` of each, `nil` for a `nil` token), looked
    /// up in the tree's byte order through one cursor: LMDB searches only the page of the previous lookup
    /// when the next key falls in it, and the pages a search crosses stay in the CPU's caches, where lookups in
    /// request order search from the root each time. Tokens stored under their hash go one by one.
    static func instanceIDs(of tokens: [RegistrationToken?], txn: LMDBTransaction, schema: LedgerSchema) throws
        -> [InstanceID?]
    {
        var ids = [InstanceID?](repeating: nil, count: tokens.count)
        // The inline keys laid end to end, and each one's token index and place.
        var keys: [UInt8] = []
        var places: [(token: Int, start: Int, end: Int)] = []
        places.reserveCapacity(tokens.count)
        for (index, token) in tokens.enumerated() {
            guard let token else { continue }
            guard !NameKey.isHashed(byteCount: token.rawValue.utf8.count) else {
                ids[index] = try instanceID(of: token, txn: txn, schema: schema)
                continue
            }
            let start = keys.count
            keys.append(contentsOf: token.rawValue.utf8)
            places.append((index, start, keys.count))
        }
        let cursor = try txn.cursor(schema.tokens)
        try keys.withUnsafeBytes { keys in
            func key(_ place: (token: Int, start: Int, end: Int)) -> UnsafeRawBufferPointer {
                UnsafeRawBufferPointer(rebasing: keys[place.start..<place.end])
            }
            // Sorted by each key's first eight bytes as an integer (a shorter key zero-padded, which keeps the
            // byte order: no token byte is 0), and only keys that share them by all their bytes: an integer
            // comparison where a sort by `memcmp` alone made a call per comparison.
            var order = places.indices.map { (prefix: key(places[$0]).loadBigEndianUInt64(), place: $0) }
            order.sort { left, right in
                left.prefix != right.prefix
                    ? left.prefix < right.prefix : ByteOrder.precedes(key(places[left.place]), key(places[right.place]))
            }
            for entry in order {
                let place = places[entry.place]
                if let found = try cursor.find(key(place)) {
                    ids[place.token] = try storedID(found.value, in: "tokens")
                }
            }
        }
        return ids
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
