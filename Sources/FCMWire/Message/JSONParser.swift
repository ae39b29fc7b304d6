import LedgerCore

/// Why bytes are not one JSON value (RFC 8259), and where.
public struct JSONParseError: Error, Equatable, Sendable, CustomStringConvertible {
    /// What is wrong.
    public var message: String
    /// The byte offset where the parser stopped.
    public var offset: Int

    public var description: String { "\(message) at byte \(offset)" }
}

extension JSONValue {
    /// Nesting deeper than this is refused rather than parsed: the parser recurses once per level, and a
    /// body of a million `[` must not exhaust the stack.
    public static let maximumDepth = 512

    /// Parses one JSON value (RFC 8259: UTF-8, no byte-order mark, whitespace around it allowed).
    ///
    /// The same values as `JSONSerialization` followed by ``init(_:)`` (which the send route used before,
    /// and which the tests compare it with): a number without fraction or exponent is an integer when
    /// `Int64` or `UInt64` holds it; any other number is a `Double`, and an integral one that `Int64` or
    /// `UInt64` holds exactly is that integer (`1.0` is `1`, as `Int64(exactly:)` read it from the
    /// `NSNumber`); a number too large for a finite `Double` is refused. Stricter than `JSONSerialization`
    /// where RFC 8259 is, as Google's APIs are: a name given twice in one object, invalid UTF-8 or an
    /// unpaired surrogate escape in a string, a trailing comma and a byte-order mark are errors.
    ///
    /// Written by hand because nothing among the project's dependencies builds a typed JSON tree from bytes:
    /// `JSONSerialization` gives `Any` (every value then goes through a dynamic cast and an `NSNumber`),
    /// `JSONDecoder` decodes only types whose shape is known, and an FCM message carries free-form objects
    /// (`apns.payload`, `webpush.notification`) that are passed to devices as they came. Reading and
    /// validating a send's body this way ran 6.6–7.3 times as fast (48 bytes) and 7.8–8.5 times as fast
    /// (744 bytes) as reading it with `JSONSerialization` and converting its `Any` tree before the same
    /// validation (`ledger-bench --only message`, docs/performance.md).
    public init(parsing bytes: some Collection<UInt8>) throws(JSONParseError) {
        func parse(_ buffer: UnsafeBufferPointer<UInt8>) -> Result<JSONValue, JSONParseError> {
            var parser = JSONParser(buffer)
            return Result { () throws(JSONParseError) in try parser.document() }
        }
        let result =
            bytes.withContiguousStorageIfAvailable(parse) ?? Array(bytes).withUnsafeBufferPointer(parse)
        self = try result.get()
    }
}

/// A recursive-descent reader over contiguous bytes, one value at a time.
private struct JSONParser {
    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0
    var depth = 0

    init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    mutating func document() throws(JSONParseError) -> JSONValue {
        skipWhitespace()
        let value = try self.value()
        skipWhitespace()
        guard index == bytes.count else { throw fail("unexpected text after the value") }
        return value
    }

    func fail(_ message: String) -> JSONParseError { JSONParseError(message: message, offset: index) }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    mutating func value() throws(JSONParseError) -> JSONValue {
        guard index < bytes.count else { throw fail("a value was expected") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try object()
        case UInt8(ascii: "["): return try array()
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"):
            try literal("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try literal("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try literal("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
        default: throw fail("a value was expected")
        }
    }

    mutating func literal(_ word: StaticString) throws(JSONParseError) {
        let count = word.utf8CodeUnitCount
        guard bytes.count - index >= count,
            UnsafeBufferPointer(start: word.utf8Start, count: count).elementsEqual(bytes[index..<index + count])
        else { throw fail("a value was expected") }
        index += count
    }

    mutating func enter() throws(JSONParseError) {
        depth += 1
        guard depth <= JSONValue.maximumDepth else {
            throw fail("values are nested more than \(JSONValue.maximumDepth) deep")
        }
        index += 1
        skipWhitespace()
    }

    mutating func object() throws(JSONParseError) -> JSONValue {
        try enter()
        var members: [String: JSONValue] = [:]
        if closes(UInt8(ascii: "}")) { return .object(members) }
        repeat {
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw fail("a name was expected") }
            let nameOffset = index
            let name = try string()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw fail("':' was expected") }
            index += 1
            skipWhitespace()
            let member = try value()
            guard members.updateValue(member, forKey: name) == nil else {
                throw JSONParseError(message: "the name \"\(name)\" appears twice in one object", offset: nameOffset)
            }
        } while try !endsAfterItem(UInt8(ascii: "}"))
        return .object(members)
    }

    mutating func array() throws(JSONParseError) -> JSONValue {
        try enter()
        var elements: [JSONValue] = []
        if closes(UInt8(ascii: "]")) { return .array(elements) }
        repeat {
            elements.append(try value())
        } while try !endsAfterItem(UInt8(ascii: "]"))
        return .array(elements)
    }

    /// Whether the container ends here: its closing byte is consumed and its level left.
    mutating func closes(_ closer: UInt8) -> Bool {
        guard index < bytes.count, bytes[index] == closer else { return false }
        index += 1
        depth -= 1
        return true
    }

    /// After a member or an element: `true` at the container's end, `false` after a comma (and the
    /// whitespace after it).
    mutating func endsAfterItem(_ closer: UInt8) throws(JSONParseError) -> Bool {
        skipWhitespace()
        if closes(closer) { return true }
        guard index < bytes.count, bytes[index] == UInt8(ascii: ",") else {
            throw fail("',' or '\(Character(Unicode.Scalar(closer)))' was expected")
        }
        index += 1
        skipWhitespace()
        return false
    }

    /// A string starting at its opening quote; `index` ends after its closing quote.
    mutating func string() throws(JSONParseError) -> String {
        index += 1
        let start = index
        // The common case: no escapes, so the text is the bytes between the quotes.
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                guard let text = String(validating: bytes[start..<index], as: UTF8.self) else {
                    throw JSONParseError(message: "a string is not UTF-8", offset: start)
                }
                index += 1
                return text
            }
            if byte == UInt8(ascii: "\\") { break }
            guard byte >= 0x20 else { throw fail("a control character must be escaped in a string") }
            index += 1
        }
        var decoded = Array(bytes[start..<index])
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                guard let text = String(validating: decoded, as: UTF8.self) else {
                    throw JSONParseError(message: "a string is not UTF-8", offset: start)
                }
                index += 1
                return text
            case UInt8(ascii: "\\"):
                index += 1
                try escape(into: &decoded)
            case 0..<0x20:
                throw fail("a control character must be escaped in a string")
            default:
                decoded.append(byte)
                index += 1
            }
        }
        throw fail("a string is not closed")
    }

    /// The escape after a backslash, appended as UTF-8.
    mutating func escape(into decoded: inout [UInt8]) throws(JSONParseError) {
        guard index < bytes.count else { throw fail("a string is not closed") }
        let escape = bytes[index]
        index += 1
        if let byte = JSONEscape.byte(after: escape) {
            decoded.append(byte)
            return
        }
        guard escape == UInt8(ascii: "u") else {
            index -= 1
            throw fail("an unknown escape in a string")
        }
        var scalar = try hexUnit()
        if (0xD800..<0xDC00).contains(scalar) {
            guard bytes.count - index >= 2, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u")
            else { throw fail("a high surrogate escape must be followed by a low one") }
            index += 2
            let low = try hexUnit()
            guard (0xDC00..<0xE000).contains(low) else {
                throw fail("a high surrogate escape must be followed by a low one")
            }
            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
        } else if (0xDC00..<0xE000).contains(scalar) {
            throw fail("a low surrogate escape without a high one")
        }
        // Every value left is a scalar: below 0x110000 and not a surrogate.
        guard let unicode = Unicode.Scalar(scalar) else { throw fail("an escape is not a Unicode scalar") }
        UTF8.encode(unicode) { decoded.append($0) }
    }

    /// Four hexadecimal digits.
    mutating func hexUnit() throws(JSONParseError) -> UInt32 {
        guard bytes.count - index >= 4 else { throw fail("\\u needs four hexadecimal digits") }
        var unit: UInt32 = 0
        for _ in 0..<4 {
            guard let digit = Hex.value(ofDigit: bytes[index]) else { throw fail("\\u needs four hexadecimal digits") }
            unit = unit << 4 | UInt32(digit)
            index += 1
        }
        return unit
    }

    mutating func digits() -> Int {
        let start = index
        while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
        return index - start
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    mutating func number() throws(JSONParseError) -> JSONValue {
        let start = index
        let negative = bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        let integerStart = index
        guard digits() > 0 else { throw fail("a number needs digits") }
        if bytes[integerStart] == UInt8(ascii: "0") && index - integerStart > 1 {
            throw JSONParseError(message: "a number may not start with 0", offset: integerStart)
        }
        var integral = true
        if index < bytes.count && bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard digits() > 0 else { throw fail("a number needs digits after '.'") }
            integral = false
        }
        if index < bytes.count && (bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E")) {
            index += 1
            if index < bytes.count && (bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-")) {
                index += 1
            }
            guard digits() > 0 else { throw fail("a number needs digits in its exponent") }
            integral = false
        }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        if integral {
            if let integer = Int64(text) { return .integer(integer) }
            if !negative, let unsigned = UInt64(text) { return .unsigned(unsigned) }
        }
        guard let double = Double(text), double.isFinite else {
            throw JSONParseError(message: "a number is too large", offset: start)
        }
        if let integer = Int64(exactly: double) { return .integer(integer) }
        if let unsigned = UInt64(exactly: double) { return .unsigned(unsigned) }
        return .number(double)
    }
}

/// JSON's one-character escapes, shared by the readers of request bodies (this parser and
/// ``FlatJSONObject``).
enum JSONEscape {
    /// The byte `\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r` or `\t` stands for, given the byte after the
    /// backslash; `nil` for `u` (four hex digits follow) and for anything JSON does not define.
    @inline(__always)
    static func byte(after escape: UInt8) -> UInt8? {
        switch escape {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): escape
        case UInt8(ascii: "b"): 0x08
        case UInt8(ascii: "f"): 0x0C
        case UInt8(ascii: "n"): 0x0A
        case UInt8(ascii: "r"): 0x0D
        case UInt8(ascii: "t"): 0x09
        default: nil
        }
    }
}
