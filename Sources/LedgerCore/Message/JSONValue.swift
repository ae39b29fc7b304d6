import Foundation

/// A JSON value copied out of what `JSONSerialization` parsed, so that it can be encoded again exactly —
/// booleans stay booleans, integers stay integers — with keys in code-point order (``DevicePayload``
/// passes `apns.payload`, `webpush.notification` and the like through to devices).
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

    /// Converts a value `JSONSerialization` produced; `nil` for anything else (which a stored message,
    /// parsed by `JSONSerialization`, never holds).
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

    /// UTF-8 JSON with keys sorted by code point and `/` unescaped.
    public var json: [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes, .sortedKeys]
        // Only finite numbers are ever held (see init), so encoding cannot fail.
        return (try? encoder.encode(self)).map(Array.init) ?? Array("null".utf8)
    }
}
