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
            for index in bytes.indices where !isTokenByte(bytes[index]) { return index }
            return nil
        }
        if let offset { return offset }
        // A bridged string without contiguous UTF-8 (never on Linux).
        return utf8.firstIndex(where: { !isTokenByte($0) }).map { utf8.distance(from: utf8.startIndex, to: $0) }
    }

    @inline(__always)
    static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: ":"), UInt8(ascii: "."),
            UInt8(ascii: "-"):
            return true
        default:
            return false
        }
    }

    /// Byte order of the UTF-8 form (the order of the recipient digest), compared with `memcmp`.
    public static func < (lhs: Self, rhs: Self) -> Bool {
        var left = lhs.rawValue
        var right = rhs.rawValue
        return left.withUTF8 { a in
            right.withUTF8 { b in
                let common = min(a.count, b.count)
                let order = common == 0 ? 0 : memcmp(a.baseAddress!, b.baseAddress!, common)
                return order != 0 ? order < 0 : a.count < b.count
            }
        }
    }

    /// Redacted: tokens must not reach logs through string interpolation.
    public var description: String { "RegistrationToken(redacted)" }
}
