import FCMWire
import Foundation
import LedgerCore
import LedgerTestSupport
import PropertyBased
import Testing

@Suite("StrictJSON: byte-order marks, UTF-8 and repeated names", .offThePool)
struct StrictJSONTests {
    @Test("known bodies")
    func knownBodies() {
        #expect(StrictJSON.problem(in: Array(#"{"a":1,"b":{"a":2}}"#.utf8)) == nil)
        #expect(StrictJSON.problem(in: Array(#"{"a":1,"a":2}"#.utf8)) == #"the key "a" appears twice in one object"#)
        #expect(
            StrictJSON.problem(in: Array(#"{"a":1,"\u0061":2}"#.utf8)) == #"the key "a" appears twice in one object"#)
        #expect(StrictJSON.problem(in: Array(#"{"a":"\"a\":","b":["a","a"]}"#.utf8)) == nil)
        #expect(StrictJSON.problem(in: [0xEF, 0xBB, 0xBF] + Array("{}".utf8))?.contains("byte-order mark") == true)
        #expect(StrictJSON.problem(in: Array(#"{"a":"\#u{0}"}"#.utf8)) == "the body is not UTF-8")
        #expect(StrictJSON.problem(in: [UInt8(ascii: "\""), 0xC3, UInt8(ascii: "\"")]) == "the body is not UTF-8")
    }

    @Test("random nested bodies: the first name repeated within one object, wherever values look like keys")
    func randomBodies() async {
        await propertyCheck(count: 2000, input: Gen.uint64()) { seed in
            var generator = SeededGenerator(seed: seed)
            var body = RandomBody(generator: generator)
            let text = body.object(depth: 0)
            generator = body.generator
            let expected = body.firstRepeated.map { "the key \"\($0)\" appears twice in one object" }
            let bytes = Array(text.utf8)
            #expect(StrictJSON.problem(in: bytes) == expected, "\(text)")
            // A collection without contiguous storage takes the copying path and must say the same.
            #expect(StrictJSON.problem(in: AnyCollection(bytes)) == expected, "\(text)")
        }
    }
}

/// A JSON object built in document order, remembering the first name that repeats within one object.
private struct RandomBody {
    var generator: SeededGenerator
    var firstRepeated: String?
    static let names = ["a", "b", "é", "q\"uote", "back\\slash", "😀", "{", ":"]
    static let strings = [#"x"#, #"\"a\":"#, #"{\"a\":1,"#, #"\\"#, #"}]"#, #"\u0061"#, #"\\\""#, "é😀", ""]

    mutating func object(depth: Int) -> String {
        var seen: Set<String> = []
        var members: [String] = []
        for _ in 0..<Int.random(in: 0...5, using: &generator) {
            let name = Self.names.randomElement(using: &generator)!
            if !seen.insert(name).inserted, firstRepeated == nil { firstRepeated = name }
            let key = Bool.random(using: &generator) ? Self.plain(name) : Self.escaped(name)
            members.append(key + ":" + value(depth: depth))
        }
        return "{" + members.joined(separator: ",") + "}"
    }

    private mutating func value(depth: Int) -> String {
        switch Int.random(in: 0...(depth < 3 ? 4 : 1), using: &generator) {
        case 0: return "\"" + Self.strings.randomElement(using: &generator)! + "\""
        case 1: return String(Int.random(in: -5...5, using: &generator))
        case 2, 3: return object(depth: depth + 1)
        default:
            let count = Int.random(in: 0...3, using: &generator)
            return "[" + (0..<count).map { _ in value(depth: depth + 1) }.joined(separator: ",") + "]"
        }
    }

    /// `"name"` with only `"` and `\` escaped.
    static func plain(_ name: String) -> String {
        "\"" + name.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
    }

    /// `"name"` spelled entirely in `\uXXXX` escapes (surrogate pairs beyond the BMP).
    static func escaped(_ name: String) -> String {
        "\"" + name.utf16.map { "\\u" + String(format: "%04x", $0) }.joined() + "\""
    }
}
