#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A registration token: the secret that names one app instance.
///
/// Valid tokens are 1…4096 characters from `[A-Za-z0-9_:.-]` (the alphabet of FCM tokens and of the
/// tokens this server issues).
///
/// - Important: Tokens are secrets. Never log them.
public struct RegistrationToken: Hashable, Sendable, Comparable, CustomStringConvertible {
    public let rawValue: String

    public static let maximumLength = 4096

    /// Validates `rawValue`.
    ///
    /// - Parameter field: the input field named in the error.
    /// - Throws: `LedgerCoreError.Code.invalidArgument` naming `field` when the token is malformed.
    public init(_ rawValue: String, field: String = "token") throws(LedgerCoreError) {
        let utf8 = rawValue.utf8
        guard !utf8.isEmpty else {
            throw LedgerCoreError(.invalidArgument, field: field, "registration token is empty")
        }
        guard utf8.count <= Self.maximumLength else {
            throw LedgerCoreError(
                .invalidArgument, field: field, "registration token is longer than \(Self.maximumLength) characters")
        }
        if let position = Self.firstInvalidOffset(utf8) {
            throw LedgerCoreError(
                .invalidArgument, field: field,
                "registration token has a character outside [A-Za-z0-9_:.-] at offset \(position)")
        }
        self.rawValue = rawValue
    }

    /// Wraps a token read back from the log, which was validated when it was appended.
    package init(trusted rawValue: String) { self.rawValue = rawValue }

    /// The offset of the first byte outside the alphabet, or `nil`: a loop over the contiguous UTF-8 bytes
    /// (walking `String.UTF8View` with `firstIndex(where:)` was 7.7 % of the server under batchAdd load).
    static func firstInvalidOffset(_ utf8: String.UTF8View) -> Int? {
        let offset = utf8.withContiguousStorageIfAvailable { bytes -> Int? in
            firstInvalidOffset(in: UnsafeRawBufferPointer(bytes))
        }
        if let offset { return offset }
        // A bridged string without contiguous UTF-8 (never on Linux).
        return utf8.firstIndex(where: { !isTokenByte($0) }).map { utf8.distance(from: utf8.startIndex, to: $0) }
    }

    /// The offset of the first byte of `bytes` outside the alphabet, or `nil`: eight bytes at a time without
    /// a branch per byte, then byte by byte from the first eight that hold one (or for the last few).
    ///
    /// A `switch` over the alphabet's ranges branched on every byte, and the branches of random base64 text
    /// cannot be predicted: 520 MB/s over 1,000 random 150-byte tokens in a micro-benchmark, 5.8 % of the
    /// server's samples under batchAdd; 2.4 GB/s this way.
    static func firstInvalidOffset(in bytes: UnsafeRawBufferPointer) -> Int? {
        var index = 0
        while index + 8 <= bytes.count {
            var valid = true
            for offset in 0..<8 { valid = valid && isTokenByte(bytes[index + offset]) }
            guard valid else { break }
            index += 8
        }
        while index < bytes.count {
            if !isTokenByte(bytes[index]) { return index }
            index += 1
        }
        return nil
    }

    /// `[A-Za-z0-9_:.-]`: one bit per byte value below 128, in two words.
    @inline(__always)
    static func isTokenByte(_ byte: UInt8) -> Bool {
        let low: UInt64 = 1 << 0x2D | 1 << 0x2E | 0x7FF << 0x30  // - . 0-9 :
        let high: UInt64 = 0x3FF_FFFF << 0x01 | 1 << 0x1F | 0x3FF_FFFF << 0x21  // A-Z _ a-z, from 0x40
        let word = byte < 64 ? low : (byte < 128 ? high : 0)
        return (word >> UInt64(byte & 63)) & 1 == 1
    }

    /// Byte order of the UTF-8 form (the order of the recipient digest and of the `tokens` tree).
    public static func < (lhs: Self, rhs: Self) -> Bool {
        var left = lhs.rawValue
        var right = rhs.rawValue
        return left.withUTF8 { a in
            right.withUTF8 { b in ByteOrder.precedes(UnsafeRawBufferPointer(a), UnsafeRawBufferPointer(b)) }
        }
    }

    /// Redacted: tokens must not reach logs through string interpolation.
    public var description: String { "RegistrationToken(redacted)" }
}

/// LMDB's default key order, which byte strings of names and tokens are sorted in.
public enum ByteOrder {
    /// Whether `left` sorts before `right`: bytes compared as unsigned (`memcmp`), a prefix before the longer.
    public static func precedes(_ left: UnsafeRawBufferPointer, _ right: UnsafeRawBufferPointer) -> Bool {
        let common = min(left.count, right.count)
        guard common > 0, let leftBytes = left.baseAddress, let rightBytes = right.baseAddress else {
            return left.count < right.count
        }
        let order = memcmp(leftBytes, rightBytes, common)
        return order < 0 || (order == 0 && left.count < right.count)
    }
}
