import FCMWire
import Foundation
import LedgerCore
import LedgerTestSupport
import Testing

/// Random JSON text: whitespace between tokens, numbers in every form the grammar has (signs, fractions,
/// exponents, the edges of Int64 and UInt64, beyond them), strings with every kind of escape (surrogate
/// pairs too), raw non-ASCII text, nesting of arrays and objects.
private struct JSONTextGenerator {
    var generator: SeededGenerator

    mutating func pick<T>(_ choices: [T]) -> T { choices.randomElement(using: &generator)! }
    mutating func chance(_ percent: Int) -> Bool { Int.random(in: 0..<100, using: &generator) < percent }

    mutating func space() -> String { chance(20) ? pick([" ", "\n", "\t", "\r\n  "]) : "" }

    mutating func number() -> String {
        if chance(25) {
            return pick([
                "0", "-0", "9223372036854775807", "-9223372036854775807", "9223372036854775808",
                "18446744073709551615", "18446744073709551616", "-9223372036854777856", "-1e19", "1.0", "2.5e3", "1E-7",
                "-0.0", "1e19", "123456789012345678901234567890", "333333333333333333333333.333333333333333333333333",
                "4.9e-324", "1.7976931348623157e308", "3e0",
            ])
        }
        // Not -2^63 (-9223372036854775808, or text a Double rounds to it, like -9223372036854775810):
        // JSONSerialization reads it as Int64.min + 1 or + 2, and JSONDecoder as a Double
        // (``JSONParserTests/numbers()`` checks the parser's reading of it).
        var text = chance(30) ? "-" : ""
        text += chance(20) ? "0" : String(Int.random(in: 1...999_999, using: &generator))
        if chance(40) { text += "." + String(Int.random(in: 0...99_999, using: &generator)) }
        if chance(25) {
            text += pick(["e", "E"]) + pick(["", "+", "-"]) + String(Int.random(in: 0...30, using: &generator))
        }
        return text
    }

    mutating func string() -> String {
        let pieces = [
            "a", "Z", "é", "日本", "\u{1F600}", " ", "/", "\\/", "\\\"", "\\\\", "\\n", "\\t", "\\b", "\\f", "\\r",
            "\\u0041", "\\u00e9", "\\u65E5", "\\ud83d\\ude00", "\\u0000", "\\u001f", "\\uFFFF", "\u{7F}", "e\u{301}",
            "\\u0001", "\u{2028}", "\u{FB01}", "\u{FF5E}",
        ]
        return "\"" + (0..<Int.random(in: 0...5, using: &generator)).map { _ in pick(pieces) }.joined() + "\""
    }

    mutating func value(depth: Int) -> String {
        switch Int.random(in: 0..<(depth > 0 ? 8 : 6), using: &generator) {
        case 0, 1: return string()
        case 2: return number()
        case 3: return pick(["true", "false"])
        case 4: return "null"
        case 5: return number()
        case 6:
            var names: Set<String> = []
            let members = (0..<Int.random(in: 0...4, using: &generator)).compactMap { _ -> String? in
                let name = string()
                // Unique as decoded: "/" and "\/" are one name.
                let decoded = try? JSONSerialization.jsonObject(with: Data(name.utf8), options: .fragmentsAllowed)
                guard let decoded = decoded as? String, names.insert(decoded).inserted else { return nil }
                return space() + name + space() + ":" + space() + value(depth: depth - 1) + space()
            }
            return "{" + space() + members.joined(separator: ",") + "}"
        default:
            let elements = (0..<Int.random(in: 0...4, using: &generator)).map { _ in
                space() + value(depth: depth - 1) + space()
            }
            return "[" + space() + elements.joined(separator: ",") + "]"
        }
    }
}

/// Any JSON as `JSONDecoder` reads it, each kind tried in turn through a single-value container: the
/// decoder the parser is compared with.
private struct DecodedJSON: Decodable {
    let value: JSONValue

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            value = .null
        } else if let flag = try? container.decode(Bool.self) {
            value = .bool(flag)
        } else if let integer = try? container.decode(Int64.self) {
            value = .integer(integer)
        } else if let unsigned = try? container.decode(UInt64.self) {
            value = .unsigned(unsigned)
        } else if let number = try? container.decode(Double.self) {
            value = .number(number)
        } else if let text = try? container.decode(String.self) {
            value = .string(text)
        } else if let elements = try? container.decode([DecodedJSON].self) {
            value = .array(elements.map(\.value))
        } else {
            value = .object(try container.decode([String: DecodedJSON].self).mapValues(\.value))
        }
    }
}

/// What the route read before: `JSONSerialization`, then ``JSONValue/init(_:)``.
private func foundationValue(_ bytes: [UInt8]) -> JSONValue? {
    (try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])).flatMap(JSONValue.init)
}

/// Equal, except for Foundation's number errors: `JSONSerialization` does not round decimal text of more
/// than about 16 significant digits correctly (`1.7976931348623157` reads as `1.7976931348623153`; the
/// parser uses `Double(_:)`, `strtod`, which does), so fractions may differ in their last bits — and a
/// value near 2^63 may then fall on the other side of an integer type's range; and it reads -2^63 as
/// -2^63 + 1 or + 2 (see ``JSONTextGenerator/number()``). MessageFuzzer's `readAlike` allows the same.
private func nearlyEqual(_ left: JSONValue?, _ right: JSONValue?) -> Bool {
    func double(_ value: JSONValue?) -> Double? {
        switch value {
        case .integer(let integer): Double(integer)
        case .unsigned(let unsigned): Double(unsigned)
        case .number(let number): number
        default: nil
        }
    }
    switch (left, right) {
    case (.integer(.min), .integer(let b)) where b <= .min + 2: return true
    case (.array(let a), .array(let b)): return a.count == b.count && zip(a, b).allSatisfy(nearlyEqual)
    case (.object(let a), .object(let b)):
        return a.count == b.count && a.allSatisfy { key, value in b[key].map { nearlyEqual(value, $0) } ?? false }
    case (.number, _), (_, .number):
        guard let a = double(left), let b = double(right) else { return false }
        return a == b || abs(a - b) <= 8 * max(a.ulp, b.ulp)
    default: return left == right
    }
}

@Suite("The JSON parser of send requests, against Foundation's readers", .offThePool)
struct JSONParserTests {
    @Test("random valid JSON reads as JSONSerialization and JSONDecoder read it")
    func randomValid() throws {
        var texts = JSONTextGenerator(generator: SeededGenerator(seed: 31))
        for round in 0..<3000 {
            let text = texts.space() + texts.value(depth: 4) + texts.space()
            let bytes = Array(text.utf8)
            let parsed = try JSONValue(parsing: bytes)
            #expect(nearlyEqual(parsed, foundationValue(bytes)), "round \(round): \(text)")
            let decoded = try JSONDecoder().decode(DecodedJSON.self, from: Data(bytes)).value
            #expect(parsed == decoded, "round \(round): \(text)")
            // What it encodes to reads back to itself (the stored message is read again on delivery).
            #expect(try JSONValue(parsing: parsed.json) == parsed, "round \(round): \(text)")
        }
    }

    @Test("the writer writes the bytes JSONEncoder writes (sorted keys, slashes unescaped), and they read back")
    func writerMatchesJSONEncoder() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        var texts = JSONTextGenerator(generator: SeededGenerator(seed: 33))
        for round in 0..<3000 {
            let value = try JSONValue(parsing: Array(texts.value(depth: 4).utf8))
            let written = value.json
            #expect(
                written == Array(try encoder.encode(value)),
                "round \(round): \(String(decoding: written, as: UTF8.self))")
            #expect(try JSONValue(parsing: written) == value, "round \(round)")
        }
        #expect(
            String(
                decoding: JSONValue.object(["b": .string("\u{1}\u{8}\u{1F}\u{7F}\"\\/"), "B": .number(0.5), "a": .null])
                    .json, as: UTF8.self)
                == #"{"B":0.5,"a":null,"b":"\u0001\b\u001f\#u{7F}\"\\/"}"#)
    }

    @Test("damaged JSON: whatever the parser accepts, Foundation reads as the same value; what it refuses is said")
    func randomDamaged() throws {
        var texts = JSONTextGenerator(generator: SeededGenerator(seed: 32))
        let inserts: [[UInt8]] = ["{", "}", "[", "]", ",", ":", "\"", "\\", "-", ".", "e", "0", " ", "\u{1}", "t"].map {
            Array($0.utf8)
        }
        var refused = 0
        for round in 0..<5000 {
            var bytes = Array(texts.value(depth: 3).utf8)
            for _ in 0..<Int.random(in: 1...3, using: &texts.generator) {
                let at = Int.random(in: 0...bytes.count, using: &texts.generator)
                switch Int.random(in: 0..<4, using: &texts.generator) {
                case 0 where at < bytes.count: bytes.remove(at: at)
                case 1 where at < bytes.count: bytes[at] = UInt8.random(in: 0...255, using: &texts.generator)
                case 2: bytes.insert(contentsOf: texts.pick(inserts), at: at)
                default: bytes = Array(bytes.prefix(at))
                }
            }
            let foundation = foundationValue(bytes)
            do {
                let parsed = try JSONValue(parsing: bytes)
                #expect(nearlyEqual(parsed, foundation), "round \(round): \(String(decoding: bytes, as: UTF8.self))")
            } catch {
                refused += 1
                #expect(error.offset >= 0 && error.offset <= bytes.count)
                #expect(!error.message.isEmpty)
                // Foundation refuses it too, unless it is one of the things the route refuses anyway.
                if foundation != nil {
                    #expect(
                        StrictJSON.problem(in: bytes) != nil || Self.hasLoneSurrogate(bytes)
                            || Self.isTrailingComma(error, in: bytes),
                        "round \(round): only Foundation accepted \(String(decoding: bytes, as: UTF8.self)): \(error)")
                }
            }
        }
        // The damage does produce refusals, so the loop above tested both sides.
        #expect(refused > 1000)
    }

    /// Whether the parser stopped at the `}` or `]` after a trailing comma, which `JSONSerialization` accepts
    /// and RFC 8259 (and Google's APIs) do not.
    static func isTrailingComma(_ error: JSONParseError, in bytes: [UInt8]) -> Bool {
        guard error.offset < bytes.count, [UInt8(ascii: "}"), UInt8(ascii: "]")].contains(bytes[error.offset]) else {
            return false
        }
        return bytes[..<error.offset].last { ![0x20, 0x09, 0x0A, 0x0D].contains($0) } == UInt8(ascii: ",")
    }

    /// Whether the text has a `\uD800`–`\uDFFF` escape (which a surrogate pair's halves are too).
    static func hasLoneSurrogate(_ bytes: [UInt8]) -> Bool {
        String(decoding: bytes, as: UTF8.self).lowercased().contains("\\ud")
    }

    @Test("numbers: integers as Int64 or UInt64, integral fractions as integers, anything else a Double")
    func numbers() throws {
        let cases: [(String, JSONValue)] = [
            ("0", .integer(0)), ("-0", .integer(0)), ("1.0", .integer(1)), ("-0.0", .integer(0)),
            ("2.5e3", .integer(2500)),
            ("9223372036854775807", .integer(.max)), ("-9223372036854775808", .integer(.min)),
            ("9223372036854775808", .unsigned(9_223_372_036_854_775_808)), ("18446744073709551615", .unsigned(.max)),
            ("1e19", .unsigned(10_000_000_000_000_000_000)),
            ("18446744073709551616", .number(18_446_744_073_709_551_616)),
            // One below Int64.min is a Double, which rounds to -2^63: an integer again.
            ("-9223372036854775809", .integer(.min)), ("0.5", .number(0.5)), ("1E-7", .number(1e-7)),
            ("1e-400", .integer(0)),
            // A number with an exponent or a fraction is read as the nearest Double (as Google's JSON readers
            // do), then as an integer when it is one: 444444444444444416, where JSONSerialization reads a
            // Decimal, 444444444444444444, exactly.
            ("444444444444444444e0", .integer(444_444_444_444_444_416)),
            ("444444444444444444", .integer(444_444_444_444_444_444)),
        ]
        for (text, expected) in cases {
            #expect(try JSONValue(parsing: Array(text.utf8)) == expected, "\(text)")
        }
        for text in ["01", "-", "1.", ".5", "1e", "1e+", "+1", "1e400", "-1e400", "0x10", "NaN", "Infinity", "1 2"] {
            #expect(throws: JSONParseError.self, "\(text)") { try JSONValue(parsing: Array(text.utf8)) }
        }
    }

    @Test(
        "strings: escapes decoded, surrogate pairs joined; lone surrogates, raw control characters and bad UTF-8 refused"
    )
    func strings() throws {
        #expect(
            try JSONValue(parsing: Array(#""a\/b\"\\\n\u00e9\ud83d\ude00""#.utf8)) == .string("a/b\"\\\né\u{1F600}"))
        #expect(try JSONValue(parsing: Array(#""\u0000""#.utf8)) == .string("\u{0}"))
        let refused: [[UInt8]] = [
            Array(#""\ud800""#.utf8), Array(#""\udc00""#.utf8), Array(#""\ud800\u0041""#.utf8), Array(#""\x""#.utf8),
            Array(#""\u12""#.utf8), Array(#""abc"#.utf8), [0x22, 0x0A, 0x22], [0x22, 0xFF, 0x22], [0x22, 0xC3, 0x22],
        ]
        for bytes in refused {
            #expect(throws: JSONParseError.self, "\(bytes)") { try JSONValue(parsing: bytes) }
        }
    }

    @Test("structure: a name given twice, trailing text, an empty body and nesting past 512 levels are refused")
    func structure() throws {
        let error = try #require(throws: JSONParseError.self) { try JSONValue(parsing: Array(#"{"a":1, "a":2}"#.utf8)) }
        #expect(error.message == #"the name "a" appears twice in one object"#)
        #expect(error.offset == 8)
        // A trailing comma too, which JSONSerialization accepts (and the route therefore did, before this parser).
        for text in [
            "", " ", "{} {}", "{", "[1,]", "{\"a\":1,}", "{\"a\":1 , }", "{\"a\"}", "{1:2}", "[1 2]", "tru", "nul",
        ] {
            #expect(throws: JSONParseError.self, "\(text)") { try JSONValue(parsing: Array(text.utf8)) }
        }
        let deepest = String(repeating: "[", count: 512) + String(repeating: "]", count: 512)
        #expect(try JSONValue(parsing: Array(deepest.utf8)).array?.count == 1)
        for text in [
            "[" + deepest + "]", String(repeating: "[", count: 1_000_000), String(repeating: "{\"a\":", count: 100_000),
        ] {
            let error = try #require(throws: JSONParseError.self) { try JSONValue(parsing: Array(text.utf8)) }
            #expect(error.message.contains("nested more than 512"))
        }
        #expect(
            try JSONValue(parsing: Array(" \t\r\n{ \"a\" : [ 1 , true , null ] }\n".utf8))
                == .object(["a": .array([.integer(1), .bool(true), .null])]))
    }
}
