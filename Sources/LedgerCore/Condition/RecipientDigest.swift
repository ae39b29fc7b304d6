import Crypto

/// The recipient digest of an audience: lowercase-hex SHA-256 of the recipients' registration tokens
/// sorted by byte order, each followed by `\n` (the empty audience hashes the empty string).
///
/// Anyone holding the list can check it: `sort | sha256sum` with `LC_ALL=C`.
public enum RecipientDigest {
    /// The 32-byte digest of `tokens`, which must already be in byte order.
    public static func digest(sortedTokens tokens: some Sequence<RegistrationToken>) -> [UInt8] {
        var builder = Builder()
        for token in tokens {
            var raw = token.rawValue
            raw.withUTF8 { builder.add(rawToken: UnsafeRawBufferPointer($0)) }
        }
        return builder.finish()
    }

    /// Builds a digest from tokens' raw UTF-8 bytes, given in byte order, without materializing them (the
    /// store streams them from its token index).
    public struct Builder {
        private var hasher = SHA256()
        public private(set) var count = 0

        public init() {}

        public mutating func add(rawToken bytes: UnsafeRawBufferPointer) {
            hasher.update(bufferPointer: bytes)
            withUnsafeBytes(of: UInt8(ascii: "\n")) { hasher.update(bufferPointer: $0) }
            count += 1
        }

        public func finish() -> [UInt8] { Array(hasher.finalize()) }
    }
}
