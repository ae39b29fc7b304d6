/// A JSON value, as a delivered payload holds it. The library's own small type (the server's `JSONValue` lives
/// in LedgerCore, which an app does not link): decodable, comparable and `Sendable`, with the accessors an app
/// needs to read `aps` and data keys.
public enum PayloadValue: Sendable, Hashable, Codable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([PayloadValue])
    case object([String: PayloadValue])

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([PayloadValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: PayloadValue].self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    public subscript(key: String) -> PayloadValue? {
        if case .object(let object) = self { return object[key] }
        return nil
    }

    public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// A number, or a boolean as 0 or 1 (`content-available` arrives as either).
    public var intValue: Int? {
        switch self {
        case .number(let value) where value.rounded() == value && abs(value) < 1e15: Int(value)
        case .bool(let value): value ? 1 : 0
        default: nil
        }
    }

    public var objectValue: [String: PayloadValue]? {
        if case .object(let value) = self { return value }
        return nil
    }
}
