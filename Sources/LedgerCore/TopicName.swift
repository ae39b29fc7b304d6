/// A topic name: `[a-zA-Z0-9-_.~%]{1,900}`, case-sensitive. A leading `/topics/` is accepted and stripped.
public struct TopicName: Hashable, Sendable, Comparable, CustomStringConvertible {
    public let rawValue: String

    public static let maximumLength = 900
    public static let prefix = "/topics/"

    /// Validates `text`, stripping a leading `/topics/`.
    ///
    /// - Parameter field: the input field named in the error (`message.topic`, `topicName`).
    /// - Throws: `LedgerCoreError.Code.invalidArgument` naming `field`, saying what is wrong.
    public init(_ text: String, field: String = "topic") throws(LedgerCoreError) {
        // `text` itself when there is no prefix: a copy would re-encode it.
        let name = text.hasPrefix(Self.prefix) ? String(text.dropFirst(Self.prefix.count)) : text
        try Self.validate(Substring(name).utf8, field: field)
        self.rawValue = name
    }

    /// Wraps a name read back from the log, which was validated when it was appended.
    package init(trusted rawValue: String) { self.rawValue = rawValue }

    static func validate(_ utf8: Substring.UTF8View, field: String) throws(LedgerCoreError) {
        guard !utf8.isEmpty else { throw LedgerCoreError(.invalidArgument, field: field, "topic name is empty") }
        guard utf8.count <= maximumLength else {
            throw LedgerCoreError(
                .invalidArgument, field: field, "topic name is longer than \(maximumLength) characters")
        }
        let firstInvalid =
            utf8.withContiguousStorageIfAvailable { bytes in bytes.firstIndex(where: { !isTopicByte($0) }) }
            ?? utf8.firstIndex(where: { !isTopicByte($0) }).map { utf8.distance(from: utf8.startIndex, to: $0) }
        if let offset = firstInvalid {
            throw LedgerCoreError(
                .invalidArgument, field: field,
                "topic name has a character outside [a-zA-Z0-9-_.~%] at offset \(offset)")
        }
    }

    @inline(__always)
    static func isTopicByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."),
            UInt8(ascii: "~"), UInt8(ascii: "%"):
            return true
        default:
            return false
        }
    }

    public static func < (lhs: Self, rhs: Self) -> Bool {
        lhs.rawValue.utf8.lexicographicallyPrecedes(rhs.rawValue.utf8)
    }

    public var description: String { rawValue }
}
