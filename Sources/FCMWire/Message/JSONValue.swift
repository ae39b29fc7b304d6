import LedgerCore

import Foundation

/// A JSON value, typed: what a send's message is validated, stored and mapped to devices as. It is
/// encoded again exactly — booleans stay booleans, integers stay integers — with keys in code-point order
/// (``DevicePayload`` passes `apns.payload`, `webpush.notification` and the like through to devices).
/// Read from bytes by ``init(parsing:)``.
///
/// Foundation has no such type: `[String: Any]` cannot be given to `JSONEncoder`, and `JSONSerialization`
/// sorts keys through ICU (25 times slower here; see ``DevicePayload/json``).
public enum JSONValue: Equatable, Sendable, Encodable {
    case string(String)
    case bool(Bool)
    case integer(Int64)
    case unsigned(UInt64)
    case number(Double)
    case null
    case array([JSONValue])
    case object([String: JSONValue])

    /// Converts a value `JSONSerialization` produced; `nil` for anything else, or for a number that is not
    /// finite. The tests hold ``init(parsing:)`` to what this gives.
    public init?(_ any: Any) {
        switch any {
        case let string as String: self = .string(string)
        case let number as NSNumber:
            if Self.isBoolean(number) {
                self = .bool(number.boolValue)
            } else if let integer = Int64(exactly: number) {
                self = .integer(integer)
            } else if let unsigned = UInt64(exactly: number) {
                self = .unsigned(unsigned)
            } else if number.doubleValue.isFinite {
                self = .number(number.doubleValue)
            } else {
                return nil
            }
        case is NSNull: self = .null
        case let array as [Any]:
            var values: [JSONValue] = []
            for element in array {
                guard let value = JSONValue(element) else { return nil }
                values.append(value)
            }
            self = .array(values)
        case let object as [String: Any]:
            var values: [String: JSONValue] = [:]
            for (key, element) in object {
                guard let value = JSONValue(element) else { return nil }
                values[key] = value
            }
            self = .object(values)
        default: return nil
        }
    }

    /// Whether `value`, from `JSONSerialization`, was `true` or `false` in the JSON: its booleans are
    /// NSNumbers of ObjC type "c", and `as? Bool` would take the numbers 0 and 1 too.
    public static func isBoolean(_ value: Any) -> Bool {
        (value as? NSNumber).map { String(cString: $0.objCType) == "c" } ?? false
    }

    /// The members of an object, `nil` for any other value.
    public var object: [String: JSONValue]? {
        if case .object(let members) = self { return members }
        return nil
    }

    /// The text of a string, `nil` for any other value.
    public var string: String? {
        if case .string(let text) = self { return text }
        return nil
    }

    /// The elements of an array, `nil` for any other value.
    public var array: [JSONValue]? {
        if case .array(let elements) = self { return elements }
        return nil
    }

    /// Whether this is `true` or `false`.
    public var isBoolean: Bool {
        if case .bool = self { return true }
        return false
    }

    /// The value of an integer, `nil` for any other value (``init(parsing:)`` reads `2.0` as the integer 2).
    public var integer: Int64? {
        if case .integer(let value) = self { return value }
        return nil
    }

    private struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .string(let text):
            var container = encoder.singleValueContainer()
            try container.encode(text)
        case .bool(let flag):
            var container = encoder.singleValueContainer()
            try container.encode(flag)
        case .integer(let integer):
            var container = encoder.singleValueContainer()
            try container.encode(integer)
        case .unsigned(let unsigned):
            var container = encoder.singleValueContainer()
            try container.encode(unsigned)
        case .number(let number):
            var container = encoder.singleValueContainer()
            try container.encode(number)
        case .null:
            var container = encoder.singleValueContainer()
            try container.encodeNil()
        case .array(let values):
            var container = encoder.unkeyedContainer()
            for value in values { try container.encode(value) }
        case .object(let members):
            var container = encoder.container(keyedBy: Key.self)
            for (key, value) in members { try container.encode(value, forKey: Key(stringValue: key)) }
        }
    }

    /// UTF-8 JSON with keys sorted by code point and `/` unescaped: the bytes `JSONEncoder` writes with
    /// `[.sortedKeys, .withoutEscapingSlashes]` (the tests compare the two on random values), written here
    /// directly. Through `JSONEncoder` this was three quarters of validating a send's message
    /// (`ledger-bench --only message`, docs/performance.md), and it renders every device payload too.
    public var json: [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(256)
        write(to: &output)
        return output
    }

    /// Appends ``json``'s bytes to `output`.
    public func write(to output: inout [UInt8]) {
        switch self {
        case .string(let text): Self.write(string: text, to: &output)
        case .bool(let flag): output.append(contentsOf: flag ? Self.trueBytes : Self.falseBytes)
        case .integer(let integer): output.append(contentsOf: String(integer).utf8)
        case .unsigned(let unsigned): output.append(contentsOf: String(unsigned).utf8)
        case .number(let number):
            // Finite (both initializers refuse anything else); as `JSONEncoder` writes it, without ".0".
            var text = number.description
            if text.hasSuffix(".0") { text.removeLast(2) }
            output.append(contentsOf: text.utf8)
        case .null: output.append(contentsOf: Self.nullBytes)
        case .array(let elements):
            output.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                element.write(to: &output)
            }
            output.append(UInt8(ascii: "]"))
        case .object(let members):
            output.append(UInt8(ascii: "{"))
            let sorted = members.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
            for (index, member) in sorted.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                Self.write(string: member.key, to: &output)
                output.append(UInt8(ascii: ":"))
                member.value.write(to: &output)
            }
            output.append(UInt8(ascii: "}"))
        }
    }

    private static let trueBytes = Array("true".utf8)
    private static let falseBytes = Array("false".utf8)
    private static let nullBytes = Array("null".utf8)
    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// A string in quotes: `"` and `\` escaped, control characters as `\n`-style escapes where JSON has
    /// one and `\u00xx` otherwise; everything else, `/` and non-ASCII text included, as it is.
    private static func write(string: String, to output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"): output.append(contentsOf: [UInt8(ascii: "\\"), byte])
            case 0x08: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "b")])
            case 0x09: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0x0A: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0C: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "f")])
            case 0x0D: output.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0..<0x20:
                output.append(contentsOf: Array("\\u00".utf8))
                output.append(hexDigits[Int(byte >> 4)])
                output.append(hexDigits[Int(byte & 0x0F)])
            default: output.append(byte)
            }
        }
        output.append(UInt8(ascii: "\""))
    }
}
