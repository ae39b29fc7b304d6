import LedgerCore

/// A byte-level reader for one JSON shape: an object whose members that matter are strings, integers or
/// arrays of strings (other values are checked and skipped). It is what `ledger import` parses every line
/// with, and what reads a `/iid/v1:batchAdd` body (``TopicBatchBody``).
///
/// Why by hand: `JSONDecoder` spent about 4.7 µs on a 110-byte import line (75 % of `ledger import`'s time
/// in a `perf` profile; docs/performance.md), building a generic value tree and coding paths for a shape
/// that needs neither. This reader walks the bytes once and makes only the strings it returns. It accepts
/// RFC 8259 JSON (tested against `JSONSerialization` on random and malformed input) with a nesting limit
/// of 512; it refuses a comma before `]` or `}` and numbers beyond a Double's range, which Foundation takes.
public struct FlatJSONObject: Sendable {
    /// A member's value, as far as this shape cares.
    public enum Value: Sendable, Equatable {
        case string(String)
        /// A number without fraction or exponent that fits in 64 bits.
        case integer(Int64)
        /// An array; each element is its string, or `nil` when the element is not a string.
        case strings([String?])
        case null
        /// Anything else (`true`, `false`, other numbers, objects): checked, not kept.
        case other
    }

    /// The members in document order (a repeated name appears twice).
    public let members: [(name: String, value: Value)]

    /// The last member called `name` (Foundation's readers keep the last of equal names).
    public subscript(name: String) -> Value? {
        members.last(where: { $0.name == name })?.value
    }

    /// The deepest nesting accepted, as `JSONDecoder`'s.
    public static let maximumDepth = 512

    /// Parses `bytes`, which must hold one JSON object and nothing else but whitespace.
    ///
    /// - Throws: ``FlatJSONError`` saying where the bytes stop being JSON, or that they are not an object.
    public init(parsing bytes: UnsafeBufferPointer<UInt8>) throws(FlatJSONError) {
        var members: [(name: String, value: Value)] = []
        try Self.forEachMember(in: bytes) { name, value in
            members.append((String(decoding: name, as: UTF8.self), value))
        }
        self.members = members
    }

    /// Parses `bytes` as ``init(parsing:)`` does, but hands each member's name (its UTF-8, unescaped and
    /// valid) and value to `member`, in document order, instead of keeping them: for a caller that wants a
    /// few known members without a `String` per name and an array per object (`ledger import`'s lines).
    ///
    /// `member` may be called for the members before a malformation is found.
    ///
    /// - Throws: ``FlatJSONError`` saying where the bytes stop being JSON, or that they are not an object.
    public static func forEachMember(
        in bytes: UnsafeBufferPointer<UInt8>, _ member: (_ name: UnsafeBufferPointer<UInt8>, _ value: Value) -> Void
    ) throws(FlatJSONError) {
        var reader = Reader(bytes: bytes)
        reader.skipWhitespace()
        guard reader.peek() == UInt8(ascii: "{") else {
            if reader.atEnd { throw FlatJSONError("the input is empty", offset: reader.index) }
            try reader.skipValue(depth: 0)
            reader.skipWhitespace()
            guard reader.atEnd else { throw FlatJSONError("unexpected bytes after the value", offset: reader.index) }
            throw FlatJSONError("not a JSON object", offset: 0)
        }
        try reader.readMembers(member)
        reader.skipWhitespace()
        guard reader.atEnd else { throw FlatJSONError("unexpected bytes after the object", offset: reader.index) }
    }
}

/// Where and why bytes are not the JSON ``FlatJSONObject`` reads.
public struct FlatJSONError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public let offset: Int

    init(_ message: String, offset: Int) {
        self.message = message
        self.offset = offset
    }

    public var description: String { "\(message) at byte \(offset)" }
}

extension FlatJSONObject {
    private struct Reader {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0

        var atEnd: Bool { index >= bytes.count }

        func peek() -> UInt8? { index < bytes.count ? bytes[index] : nil }

        func fail(_ message: String) -> FlatJSONError { FlatJSONError(message, offset: index) }

        mutating func skipWhitespace() {
            while index < bytes.count {
                switch bytes[index] {
                case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r"): index += 1
                default: return
                }
            }
        }

        mutating func expect(_ byte: UInt8) throws(FlatJSONError) {
            skipWhitespace()
            guard peek() == byte else { throw fail("expected \(Character(Unicode.Scalar(byte)))") }
            index += 1
        }

        /// Reads the members of the object at `index` (its `{`), handing each to `member`.
        mutating func readMembers(_ member: (UnsafeBufferPointer<UInt8>, Value) -> Void) throws(FlatJSONError) {
            index += 1
            skipWhitespace()
            if peek() == UInt8(ascii: "}") {
                index += 1
                return
            }
            while true {
                skipWhitespace()
                guard peek() == UInt8(ascii: "\"") else { throw fail("expected a member name") }
                let name = try readStringBytes(keep: true)
                try expect(UInt8(ascii: ":"))
                skipWhitespace()
                let value = try readValue()
                switch name {
                case .raw(let raw): member(raw, value)
                case .escaped(var text): text.withUTF8 { member($0, value) }
                }
                if try closes(UInt8(ascii: "}")) { return }
            }
        }

        /// A member's value at `index` (whitespace skipped).
        mutating func readValue() throws(FlatJSONError) -> Value {
            switch peek() ?? 0 {
            case UInt8(ascii: "\""): return .string(try readString())
            case UInt8(ascii: "["): return .strings(try readStringArray())
            case UInt8(ascii: "n"):
                try skipLiteral("null")
                return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                let start = index
                let isInteger = try skipNumber()
                guard isInteger, let value = Self.integer(bytes[start..<index]) else { return .other }
                return .integer(value)
            default:
                try skipValue(depth: 1)
                return .other
            }
        }

        /// An array at `index`: its strings, `nil` for elements that are not strings (checked and skipped).
        mutating func readStringArray() throws(FlatJSONError) -> [String?] {
            index += 1
            var elements: [String?] = []
            skipWhitespace()
            if peek() == UInt8(ascii: "]") {
                index += 1
                return elements
            }
            while true {
                skipWhitespace()
                if peek() == UInt8(ascii: "\"") {
                    elements.append(try readString())
                } else {
                    try skipValue(depth: 2)
                    elements.append(nil)
                }
                if try closes(UInt8(ascii: "]")) { return elements }
            }
        }

        /// Checks and passes over any value at `index`, nested `depth` deep; without recursion, so no input
        /// can exhaust the stack.
        mutating func skipValue(depth: Int) throws(FlatJSONError) {
            // Each open container: true for an object, false for an array.
            var open: [Bool] = []
            while true {
                skipWhitespace()
                // A value.
                switch peek() ?? 0 {
                case UInt8(ascii: "\""): _ = try readString(keep: false)
                case UInt8(ascii: "{"), UInt8(ascii: "["):
                    let isObject = bytes[index] == UInt8(ascii: "{")
                    guard depth + open.count < maximumDepth else { throw fail("nested too deeply") }
                    open.append(isObject)
                    index += 1
                    skipWhitespace()
                    if peek() == (isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")) {
                        index += 1
                        open.removeLast()
                    } else {
                        if isObject { try skipMemberName() }
                        continue
                    }
                case UInt8(ascii: "t"): try skipLiteral("true")
                case UInt8(ascii: "f"): try skipLiteral("false")
                case UInt8(ascii: "n"): try skipLiteral("null")
                case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): _ = try skipNumber()
                default: throw fail("expected a value")
                }
                // After a value: close containers or move to the next element.
                while let isObject = open.last, try closes(isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")) {
                    open.removeLast()
                }
                if let isObject = open.last, isObject { try skipMemberName() }
                if open.isEmpty { return }
            }
        }

        /// After an element: passes over `,` (false: another element follows) or `close` (true), else throws.
        mutating func closes(_ close: UInt8) throws(FlatJSONError) -> Bool {
            skipWhitespace()
            switch peek() {
            case UInt8(ascii: ","):
                index += 1
                return false
            case close:
                index += 1
                return true
            default: throw fail("expected , or \(Character(Unicode.Scalar(close)))")
            }
        }

        private mutating func skipMemberName() throws(FlatJSONError) {
            skipWhitespace()
            guard peek() == UInt8(ascii: "\"") else { throw fail("expected a member name") }
            _ = try readString(keep: false)
            try expect(UInt8(ascii: ":"))
        }

        mutating func skipLiteral(_ literal: StaticString) throws(FlatJSONError) {
            let count = literal.utf8CodeUnitCount
            guard bytes.count - index >= count else { throw fail("expected \(literal)") }
            for offset in 0..<count where bytes[index + offset] != literal.utf8Start[offset] {
                throw fail("expected \(literal)")
            }
            index += count
        }

        /// Passes over a number (RFC 8259 grammar); whether it had neither fraction nor exponent.
        mutating func skipNumber() throws(FlatJSONError) -> Bool {
            func digits() -> Int {
                let start = index
                while index < bytes.count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") {
                    index += 1
                }
                return index - start
            }
            let start = index
            if peek() == UInt8(ascii: "-") { index += 1 }
            if peek() == UInt8(ascii: "0") {
                index += 1
            } else {
                guard digits() > 0 else { throw fail("expected a digit") }
            }
            var isInteger = true
            if peek() == UInt8(ascii: ".") {
                index += 1
                guard digits() > 0 else { throw fail("expected a digit after the decimal point") }
                isInteger = false
            }
            if peek() == UInt8(ascii: "e") || peek() == UInt8(ascii: "E") {
                index += 1
                if peek() == UInt8(ascii: "+") || peek() == UInt8(ascii: "-") { index += 1 }
                guard digits() > 0 else { throw fail("expected a digit in the exponent") }
                isInteger = false
            }
            // As Foundation's readers: a number too large for a Double is refused, not made infinite.
            if !isInteger {
                let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
                guard let value = Double(text), value.isFinite else {
                    throw FlatJSONError("a number too large", offset: start)
                }
            }
            return isInteger
        }

        /// `-?[0-9]+` as an Int64, or `nil` when it does not fit.
        static func integer(_ text: Slice<UnsafeBufferPointer<UInt8>>) -> Int64? {
            var value: Int64 = 0
            var negative = false
            for byte in text {
                if byte == UInt8(ascii: "-") {
                    negative = true
                    continue
                }
                let digit = Int64(byte &- UInt8(ascii: "0"))
                let (times, overflow) = value.multipliedReportingOverflow(by: 10)
                guard !overflow else { return nil }
                let (sum, overflow2) =
                    negative ? times.subtractingReportingOverflow(digit) : times.addingReportingOverflow(digit)
                guard !overflow2 else { return nil }
                value = sum
            }
            return value
        }

        /// The string at `index` (its opening quote), unescaped; `""` when not `keep`.
        mutating func readString(keep: Bool = true) throws(FlatJSONError) -> String {
            switch try readStringBytes(keep: keep) {
            case .raw(let raw): keep ? String(decoding: raw, as: UTF8.self) : ""
            case .escaped(let text): text
            }
        }

        /// A string as read: its bytes in the input (no escapes; checked to be UTF-8), or unescaped.
        enum StringBytes {
            case raw(UnsafeBufferPointer<UInt8>)
            case escaped(String)
        }

        /// The string at `index` (its opening quote); an escaped one is `""` when not `keep`.
        mutating func readStringBytes(keep: Bool) throws(FlatJSONError) -> StringBytes {
            index += 1
            let start = index
            // The common case: no escapes, so the bytes are the string.
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    let raw = UnsafeBufferPointer(rebasing: bytes[start..<index])
                    index += 1
                    guard raw.allSatisfy({ $0 < 0x80 }) || String(validating: raw, as: UTF8.self) != nil else {
                        throw FlatJSONError("a string is not UTF-8", offset: start)
                    }
                    return .raw(raw)
                }
                if byte == UInt8(ascii: "\\") { break }
                guard byte >= 0x20 else { throw fail("a control character in a string") }
                index += 1
            }
            guard index < bytes.count else { throw FlatJSONError("a string does not end", offset: start - 1) }
            return .escaped(try readEscapedString(from: start, keep: keep))
        }

        /// The rest of a string that has escapes, from `start` (after the quote); `index` is at the first `\`.
        private mutating func readEscapedString(from start: Int, keep: Bool) throws(FlatJSONError) -> String {
            var utf8 = Array(bytes[start..<index])
            while index < bytes.count {
                let byte = bytes[index]
                switch byte {
                case UInt8(ascii: "\""):
                    index += 1
                    guard let text = String(validating: utf8, as: UTF8.self) else {
                        throw FlatJSONError("a string is not UTF-8", offset: start)
                    }
                    return keep ? text : ""
                case UInt8(ascii: "\\"):
                    index += 1
                    guard let escape = peek() else { break }
                    index += 1
                    if let byte = JSONEscape.byte(after: escape) {
                        utf8.append(byte)
                    } else if escape == UInt8(ascii: "u") {
                        utf8.append(contentsOf: try readUnicodeEscape())
                    } else {
                        throw FlatJSONError("an unknown escape in a string", offset: index - 2)
                    }
                default:
                    guard byte >= 0x20 else { throw fail("a control character in a string") }
                    utf8.append(byte)
                    index += 1
                }
            }
            throw FlatJSONError("a string does not end", offset: start - 1)
        }

        /// After `\u`: four hex digits (and a low surrogate's `\uXXXX` after a high one), as UTF-8.
        private mutating func readUnicodeEscape() throws(FlatJSONError) -> [UInt8] {
            let escapeStart = index - 2
            let first = try readHex4()
            var scalarValue = UInt32(first)
            if (0xD800...0xDBFF).contains(first) {
                guard bytes.count - index >= 6, bytes[index] == UInt8(ascii: "\\"),
                    bytes[index + 1] == UInt8(ascii: "u")
                else { throw FlatJSONError("a lone surrogate in a string", offset: escapeStart) }
                index += 2
                let second = try readHex4()
                guard (0xDC00...0xDFFF).contains(second) else {
                    throw FlatJSONError("a lone surrogate in a string", offset: escapeStart)
                }
                scalarValue = 0x10000 + ((UInt32(first) - 0xD800) << 10) + (UInt32(second) - 0xDC00)
            } else if (0xDC00...0xDFFF).contains(first) {
                throw FlatJSONError("a lone surrogate in a string", offset: escapeStart)
            }
            guard let scalar = Unicode.Scalar(scalarValue) else {
                throw FlatJSONError("an invalid escape in a string", offset: escapeStart)
            }
            return Array(String(Character(scalar)).utf8)
        }

        private mutating func readHex4() throws(FlatJSONError) -> UInt16 {
            guard bytes.count - index >= 4 else { throw fail("expected four hex digits") }
            var value: UInt16 = 0
            for _ in 0..<4 {
                let byte = bytes[index]
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                default: throw fail("expected four hex digits")
                }
                value = value << 4 | UInt16(digit)
                index += 1
            }
            return value
        }
    }
}
