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
    ///
    /// Tokens are gathered in a 64 KiB buffer and hashed a buffer at a time: two `SHA256.update` calls per
    /// token (the token, its newline) cost more than the hashing itself for tokens of 160 bytes.
    public struct Builder {
        public static let bufferSize = 64 << 10
        private var hasher = SHA256()
        private var buffer: [UInt8] = []
        public private(set) var count = 0

        public init() {
            buffer.reserveCapacity(Self.bufferSize)
        }

        public mutating func add(rawToken bytes: UnsafeRawBufferPointer) {
            if buffer.count + bytes.count + 1 > Self.bufferSize { flush() }
            if bytes.count + 1 > Self.bufferSize {
                hasher.update(bufferPointer: bytes)
            } else {
                buffer.append(contentsOf: bytes)
            }
            buffer.append(UInt8(ascii: "\n"))
            count += 1
        }

        private mutating func flush() {
            buffer.withUnsafeBytes { hasher.update(bufferPointer: $0) }
            buffer.removeAll(keepingCapacity: true)
        }

        public mutating func finish() -> [UInt8] {
            flush()
            return Array(hasher.finalize())
        }
    }
}
