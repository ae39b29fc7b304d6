import Crypto

/// The recipient digest of an audience: lowercase-hex SHA-256 of the recipients' registration tokens
/// sorted by byte order, each followed by `\n` (the empty audience hashes the empty string).
///
/// Anyone holding the list can check it: `sort | sha256sum` with `LC_ALL=C`.
public enum RecipientDigest {
    /// The 32-byte digest of `tokens`, which must already be in byte order.
    public static func digest(sortedTokens tokens: some Sequence<RegistrationToken>) -> [UInt8] {
        var hasher = SHA256()
        let newline: [UInt8] = [UInt8(ascii: "\n")]
        for token in tokens {
            var raw = token.rawValue
            raw.withUTF8 { hasher.update(bufferPointer: UnsafeRawBufferPointer($0)) }
            hasher.update(data: newline)
        }
        return Array(hasher.finalize())
    }
}
