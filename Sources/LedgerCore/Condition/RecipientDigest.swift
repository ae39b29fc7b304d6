import Crypto

/// The recipient digest of an audience, in one of two versions that an `audience` event names:
///
/// - ``Version/tokens`` (1, every audience recorded before layout 10): lowercase-hex SHA-256 of the
///   recipients' registration tokens sorted by byte order, each followed by `\n`. Anyone holding the list
///   checks it with `LC_ALL=C sort | sha256sum`. It cannot be recomputed once a recipient is erased: its
///   token is gone from every file.
/// - ``Version/devices`` (2, every audience recorded since): SHA-256 of the recipients' device numbers in
///   ascending order, each in decimal followed by `\n` (`sort -n | sha256sum`). A device number is the
///   ordinal of the device's first registration among all devices of the project (its instance id): the
///   shared fold gives it, so a rebuild, a replica and the naive replay give the same number, and an
///   erasure, which renames the device, keeps it. The digest of a message sent before an erasure therefore
///   re-proves after it.
///
/// The empty audience hashes the empty string in both versions.
public enum RecipientDigest {
    /// What a digest is taken over.
    public enum Version: UInt32, Sendable, Equatable {
        case tokens = 1
        case devices = 2

        /// The version new audiences are recorded with.
        public static let current = Version.devices

        /// The version an `audience` event's stored number names: 0 (absent, written before versions
        /// existed) is ``tokens``; a number no version has is `nil`, and the event is refused as corrupt.
        public init?(stored: UInt32) {
            self.init(rawValue: stored == 0 ? 1 : stored)
        }
    }

    /// The 32-byte version-2 digest of `devices`, which must be in ascending order.
    public static func digest(ascendingDevices devices: some Sequence<UInt32>) -> [UInt8] {
        var builder = Builder()
        for device in devices { builder.add(device: device) }
        return builder.finish()
    }

    /// The 32-byte version-1 digest of `tokens`, which must already be in byte order.
    public static func digest(sortedTokens tokens: some Sequence<RegistrationToken>) -> [UInt8] {
        var builder = Builder()
        for token in tokens {
            var raw = token.rawValue
            raw.withUTF8 { builder.add(rawToken: UnsafeRawBufferPointer($0)) }
        }
        return builder.finish()
    }

    /// Builds a digest from device numbers in ascending order (version 2), or from tokens' raw UTF-8 bytes in
    /// byte order (version 1) without materializing them (the store streams them from its token index).
    ///
    /// Lines are gathered in a 64 KiB buffer and hashed a buffer at a time: two `SHA256.update` calls per
    /// token (the token, its newline) cost more than the hashing itself for tokens of 160 bytes.
    public struct Builder {
        public static let bufferSize = 64 << 10
        private var hasher = SHA256()
        private var buffer: [UInt8] = []
        public private(set) var count = 0

        public init() {
            buffer.reserveCapacity(Self.bufferSize)
        }

        /// Adds a device number (version 2): its decimal digits and a newline, without making a `String`.
        public mutating func add(device: UInt32) {
            if buffer.count + 11 > Self.bufferSize { flush() }
            let start = buffer.count
            var value = device
            repeat {
                buffer.append(UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: value % 10))
                value /= 10
            } while value > 0
            buffer[start...].reverse()
            buffer.append(UInt8(ascii: "\n"))
            count += 1
        }

        /// Adds a token's raw UTF-8 bytes (version 1).
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
