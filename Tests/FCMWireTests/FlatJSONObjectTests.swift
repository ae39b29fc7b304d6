import FCMWire
import Foundation
import LedgerCore
import LedgerTestSupport
import PropertyBased
import Testing

@Suite("FlatJSONObject: the byte-level reader against Foundation's", .offThePool)
struct FlatJSONObjectTests {
    @Test("random objects: the same members, strings, integers and string arrays as JSONSerialization reads")
    func agreesOnRandomObjects() async {
        await propertyCheck(count: 1000, input: Gen.uint64()) { seed in
            var generator = SeededGenerator(seed: seed)
            let text = randomObject(depth: 0, using: &generator)
            let bytes = Array(text.utf8)
            let flat = try? bytes.withUnsafeBufferPointer { try FlatJSONObject(parsing: $0) }
            let foundation = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any]
            guard let flat, let foundation else {
                Issue.record(
                    "one reader refused valid JSON: flat \(flat != nil), foundation \(foundation != nil): \(text)")
                return
            }
            #expect(Set(flat.members.map(\.name)) == Set(foundation.keys), "\(text)")
            for (name, value) in foundation {
                #expect(Self.agree(flat[name], value), "\(name) in \(text)")
            }
        }
    }

    @Test("malformed input: refused exactly when JSONSerialization refuses it as an object")
    func agreesOnMalformedInput() async {
        await propertyCheck(count: 3000, input: Gen.uint64()) { seed in
            var generator = SeededGenerator(seed: seed)
            var bytes = Array(randomObject(depth: 0, using: &generator).utf8)
            // One to three edits: cut the end, drop, change or insert a byte from JSON's own alphabet.
            let alphabet = Array("{}[]\":,.-+eE0123456789tfnul\\ \t\nabx\u{1}".utf8)
            for _ in 0..<Int.random(in: 1...3, using: &generator) where !bytes.isEmpty {
                let at = Int.random(in: 0..<bytes.count, using: &generator)
                switch Int.random(in: 0..<4, using: &generator) {
                case 0: bytes.removeSubrange(at...)
                case 1: bytes.remove(at: at)
                case 2: bytes[at] = alphabet.randomElement(using: &generator)!
                default: bytes.insert(alphabet.randomElement(using: &generator)!, at: at)
                }
            }
            let flat = try? bytes.withUnsafeBufferPointer { try FlatJSONObject(parsing: $0) }
            let foundation = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any]
            // Foundation also takes a comma before `]` or `}`, which RFC 8259 (and Google's APIs) do not.
            // And Foundation takes some numbers beyond a Double's range and refuses others; this reader
            // refuses them all.
            let lenient =
                foundation != nil && flat == nil
                && (Self.hasTrailingComma(bytes) || Self.hasNumberBeyondDouble(String(decoding: bytes, as: UTF8.self)))
            #expect(
                (flat != nil) == (foundation != nil) || lenient,
                "flat \(flat != nil), foundation \(foundation != nil): \(String(decoding: bytes, as: UTF8.self))")
            if let flat, let foundation {
                for (name, value) in foundation { #expect(Self.agree(flat[name], value), "\(name)") }
            }
        }
    }

    @Test("batchAdd bodies: TopicBatchBody reads what JSONDecoder decodes, on random and on mutated bodies")
    func batchBodyAgreesWithJSONDecoder() async {
        await propertyCheck(count: 2000, input: Gen.uint64()) { seed in
            var generator = SeededGenerator(seed: seed)
            let (body, wellFormed) = randomBatchBody(using: &generator)
            var bytes = Array(body.utf8)
            let mutated = Bool.random(using: &generator)
            if mutated {
                let alphabet = Array("{}[]\":,.-+eE0123456789tfnul\\ abx".utf8)
                for _ in 0..<Int.random(in: 1...2, using: &generator) where !bytes.isEmpty {
                    let at = Int.random(in: 0..<bytes.count, using: &generator)
                    switch Int.random(in: 0..<3, using: &generator) {
                    case 0: bytes.remove(at: at)
                    case 1: bytes[at] = alphabet.randomElement(using: &generator)!
                    default: bytes.insert(alphabet.randomElement(using: &generator)!, at: at)
                    }
                }
            }
            let flat = bytes.withUnsafeBufferPointer { TopicBatchBody(json: $0) }
            let decoded = try? JSONDecoder().decode(TopicBatchBody.Decoded.self, from: Data(bytes)).body
            let text = String(decoding: bytes, as: UTF8.self)
            // As above: JSONDecoder also takes a comma before `]` or `}` and some out-of-range numbers. And it
            // reads the strings of members it is not asked for only as far as their closing quote, so a bad
            // escape there passes; JSONSerialization, which reads every value, refuses those bodies.
            let lenient =
                flat == nil && decoded != nil
                && (Self.hasTrailingComma(bytes) || Self.hasNumberBeyondDouble(text)
                    || (try? JSONSerialization.jsonObject(with: Data(bytes))) == nil)
            #expect(
                flat == decoded || lenient,
                "flat \(String(describing: flat)), decoder \(String(describing: decoded)): \(text)")
            if !mutated && wellFormed { #expect(flat != nil, "\(text)") }
        }
    }

    /// A body with `to`, one of the two token keys and sometimes other members, in random order; values
    /// are mostly of the right kind (`wellFormed`: all are, and both members are there).
    private func randomBatchBody(using generator: inout SeededGenerator) -> (String, wellFormed: Bool) {
        var members: [String] = []
        let oddTo = Int.random(in: 0..<8, using: &generator) == 0
        members.append(#""to":"# + (oddTo ? randomValue(depth: 1, using: &generator) : randomString(using: &generator)))
        let tokens = (0..<Int.random(in: 0...6, using: &generator)).map { _ in
            Int.random(in: 0..<5, using: &generator) == 0
                ? randomValue(depth: 2, using: &generator) : randomString(using: &generator)
        }
        let key = Bool.random(using: &generator) ? "registration_tokens" : "registrationTokens"
        let oddTokens = Int.random(in: 0..<10, using: &generator) == 0
        members.append(
            "\"\(key)\":"
                + (oddTokens
                    ? randomValue(depth: 1, using: &generator) : "[" + tokens.joined(separator: ",") + "]"))
        for _ in 0..<Int.random(in: 0...2, using: &generator) {
            members.append(#""x"# + String(members.count) + #"":"# + randomValue(depth: 1, using: &generator))
        }
        members.shuffle(using: &generator)
        let dropped = Int.random(in: 0..<12, using: &generator) == 0
        if dropped { members.removeFirst() }
        return ("{" + members.joined(separator: ",") + "}", !oddTo && !oddTokens && !dropped)
    }

    @Test("escapes, surrogate pairs, integers at the edges of 64 bits, and what is not an object")
    func edges() throws {
        func parse(_ text: String) throws -> FlatJSONObject {
            try Array(text.utf8).withUnsafeBufferPointer { try FlatJSONObject(parsing: $0) }
        }
        let object = try parse(
            #"{"a":"x\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00","b":9223372036854775807,"c":-9223372036854775808,"#
                + #""d":9223372036854775808,"e":1.5,"f":["p",1,{"q":[]},"r"],"g":null,"h":true}"#)
        #expect(object["a"] == .string("x\"\\/\u{8}\u{c}\n\r\té😀"))
        #expect(object["b"] == .integer(Int64.max))
        #expect(object["c"] == .integer(Int64.min))
        #expect(object["d"] == .other)
        #expect(object["e"] == .other)
        #expect(object["f"] == .strings(["p", nil, nil, "r"]))
        #expect(object["g"] == .null)
        #expect(object["h"] == .other)
        #expect(try parse(#"{"k":1,"k":"last"}"#)["k"] == .string("last"))
        for bad in [
            "", "[1]", "\"s\"", "{", "{\"a\":1,}", "{\"a\" 1}", "{\"a\":01}", "{\"a\":\"\\ud800\"}",
            "{\"a\":\"\u{1}\"}", "{\"a\":1} x", "{\"a\":[1,]}", "{\"a\":tru}",
            "{\"a\":" + String(repeating: "[", count: 600) + String(repeating: "]", count: 600) + "}",
        ] {
            #expect(throws: FlatJSONError.self, "\(bad.prefix(40))") { try parse(bad) }
        }
        // Not UTF-8 inside a string.
        #expect(throws: FlatJSONError.self) {
            try [UInt8(ascii: "{"), 0x22, 0x61, 0x22, 0x3A, 0x22, 0xFF, 0x22, 0x7D].withUnsafeBufferPointer {
                try FlatJSONObject(parsing: $0)
            }
        }
    }

    /// Whether the flat reader's value matches what JSONSerialization made of the same member.
    static func agree(_ flat: FlatJSONObject.Value?, _ foundation: Any) -> Bool {
        switch flat {
        case .string(let text)?: return (foundation as? String) == text
        case .integer(let value)?:
            // Foundation gives integers beyond 2^53 as NSDecimalNumber, whose text is exact.
            guard !JSONValue.isBoolean(foundation), let number = foundation as? NSNumber else { return false }
            return Int64(exactly: number) == value || number.stringValue == String(value)
        case .strings(let elements)?:
            guard let array = foundation as? [Any], array.count == elements.count else { return false }
            return zip(elements, array).allSatisfy { element, value in element == (value as? String) }
        case .null?: return foundation is NSNull
        case .other?: return !(foundation is String) && !(foundation is [Any]) && !(foundation is NSNull)
        case nil: return false
        }
    }

    /// Whether `text` holds a number a `Double` cannot hold (`8630682337E728`, or 400 digits), which this
    /// reader refuses and Foundation sometimes takes. (An exponent of four digits or more, the check before,
    /// missed `E728`: one CI-sized run in six failed on it.) Digits inside strings count too, which can only
    /// excuse more.
    static func hasNumberBeyondDouble(_ text: String) -> Bool {
        text.matches(of: /[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?/).contains { match in
            Double(String(match.output.0)).map { !$0.isFinite } ?? false
        }
    }

    /// Whether `bytes` has a `,` followed (after whitespace) by `]` or `}` outside strings.
    static func hasTrailingComma(_ bytes: [UInt8]) -> Bool {
        var inString = false
        var escaped = false
        var afterComma = false
        for byte in bytes {
            if inString {
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == 0x22 {
                    inString = false
                }
                continue
            }
            switch byte {
            case 0x22: inString = true; afterComma = false
            case UInt8(ascii: ","): afterComma = true
            case UInt8(ascii: "]"), UInt8(ascii: "}"): if afterComma { return true }
            case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r"): break
            default: afterComma = false
            }
        }
        return false
    }

    private func randomObject(depth: Int, using generator: inout SeededGenerator) -> String {
        let count = Int.random(in: 0...5, using: &generator)
        let members = (0..<count).map { _ in
            randomString(using: &generator) + ":" + randomValue(depth: depth + 1, using: &generator)
        }
        return "{" + members.joined(separator: Bool.random(using: &generator) ? "," : " , ") + "}"
    }

    private func randomValue(depth: Int, using generator: inout SeededGenerator) -> String {
        switch Int.random(in: 0..<(depth > 3 ? 5 : 8), using: &generator) {
        case 0: return randomString(using: &generator)
        case 1:
            return String(
                Int64.random(in: Int64.min...Int64.max, using: &generator)
                    >> Int64.random(in: 0...63, using: &generator))
        case 2:
            return ["0", "-0", "1.5", "-2e3", "3E-2", "18446744073709551616", "0.0"].randomElement(using: &generator)!
        case 3: return ["true", "false", "null"].randomElement(using: &generator)!
        case 4:
            let elements = (0..<Int.random(in: 0...4, using: &generator)).map { _ in
                Int.random(in: 0..<4, using: &generator) == 0
                    ? randomValue(depth: depth + 1, using: &generator) : randomString(using: &generator)
            }
            return "[" + elements.joined(separator: ",") + "]"
        case 5: return randomObject(depth: depth, using: &generator)
        default:
            return "["
                + (0..<Int.random(in: 0...3, using: &generator)).map { _ in
                    randomValue(depth: depth + 1, using: &generator)
                }.joined(separator: ", ") + "]"
        }
    }

    private func randomString(using generator: inout SeededGenerator) -> String {
        let pieces = [
            "a", "token", "topic", "-", "_", ".", " ", "é", "😀", "\\n", "\\\"", "\\\\", "\\/", "\\u0041", "\\u00e9",
            "\\ud83d\\ude00", "\\t", "<", "%",
        ]
        return "\""
            + (0..<Int.random(in: 0...6, using: &generator)).map { _ in pieces.randomElement(using: &generator)! }
            .joined() + "\""
    }
}
