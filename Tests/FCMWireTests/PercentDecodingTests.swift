import FCMWire
import Foundation
import LedgerCore
import LedgerTestSupport
import PropertyBased
import Testing

@Suite("PercentDecoding against Foundation's removingPercentEncoding", .offThePool)
struct PercentDecodingTests {
    @Test("known cases: escapes of either case, multi-byte UTF-8, and the refusals")
    func knownCases() {
        #expect(PercentDecoding.decode("plain-token_1:2") == "plain-token_1:2")
        #expect(PercentDecoding.decode("a%2Fb%2fc") == "a/b/c")
        #expect(PercentDecoding.decode("%C3%A9t%C3%A9") == "été")
        #expect(PercentDecoding.decode("a+b") == "a+b")
        #expect(PercentDecoding.decode("") == "")
        for refused in ["%", "%2", "a%g0", "%zz", "%C3", "%FF", "%C3%28", "50%"] {
            #expect(PercentDecoding.decode(refused) == nil, "\(refused)")
        }
    }

    @Test("random strings of escapes, stray percents and non-ASCII: Foundation's answer, or nil where it repairs")
    func agreesWithFoundation() async {
        let pieces = [
            "%", "%2", "%2F", "%2f", "%41", "%C3", "%A9", "%E2%82%AC", "%F0%9F%98%80", "%FF", "%00", "%zz", "a", "Z",
            "0", "f", "+", "/", ":", "é", "😀", "-", "_", "~",
        ]
        await propertyCheck(count: 3000, input: Gen.uint64()) { seed in
            var generator = SeededGenerator(seed: seed)
            let text = (0..<Int.random(in: 0...12, using: &generator))
                .map { _ in pieces.randomElement(using: &generator)! }.joined()
            let foundation = text.removingPercentEncoding
            if let foundation, foundation.contains("\u{FFFD}") {
                // Foundation repairs invalid UTF-8 with U+FFFD when the string holds non-ASCII characters
                // (and refuses it otherwise); this decoder always refuses it.
                #expect(PercentDecoding.decode(text) == nil, "\(text.debugDescription)")
            } else {
                #expect(PercentDecoding.decode(text) == foundation, "\(text.debugDescription)")
            }
        }
    }
}
