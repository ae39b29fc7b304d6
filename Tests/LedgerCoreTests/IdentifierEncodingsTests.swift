import Foundation
import LedgerCore
import LedgerTestSupport
import PropertyBased
import Testing

@Suite("Identifier encodings", .offThePool)
struct IdentifierEncodingsTests {
    static let token = Array("cAbC-_dEf0123456789xyz:APA91bQ1w2E3r4T5y6-_".utf8)
    static let pseudonym = Array("erased-0123456789abcdef0123456789abcdef".utf8)

    @Test("base64 in both alphabets, padded and not, equals Foundation's; the lenient decoder reads every form back")
    func base64AgainstFoundation() async {
        await propertyCheck(count: 300, input: Gen.uint64()) { seed in
            var generator = SeededGenerator(seed: seed)
            let bytes = (0..<Int.random(in: 0...70, using: &generator)).map { _ in
                UInt8.random(in: 0...255, using: &generator)
            }
            let reference = Data(bytes).base64EncodedString()
            let standard = String(decoding: Base64Text.encode(bytes, alphabet: .standard, padded: true), as: UTF8.self)
            #expect(standard == reference)
            let url = String(decoding: Base64Text.encode(bytes, alphabet: .url, padded: false), as: UTF8.self)
            #expect(
                url
                    == reference.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                    .replacingOccurrences(of: "=", with: ""))
            for alphabet in [Base64Text.Alphabet.standard, .url] {
                for padded in [true, false] {
                    #expect(Base64Text.decode(Base64Text.encode(bytes, alphabet: alphabet, padded: padded)) == bytes)
                }
            }
        }
        for bad in ["A", "AAAAA", "AA=A", "A A=", "AAé"] {
            #expect(Base64Text.decode(Array(bad.utf8)) == nil, "\(bad)")
        }
    }

    @Test("every form of a token, inside JSON values, a URL and text, becomes the same form of its pseudonym")
    func everyFormIsRewritten() throws {
        var encodings = IdentifierEncodings()
        encodings.add(Self.token, replacedBy: Self.pseudonym, owner: 7)
        let tokenForms = IdentifierEncodings.encodings(of: Self.token)
        let pseudonymForms = IdentifierEncodings.encodings(of: Self.pseudonym)
        // Text, hex ×2, base64 ×2, base64url ×2, percent ×2, percent of base64 ×4: 13, some the same bytes.
        #expect(tokenForms.count == 13)
        #expect(String(decoding: tokenForms[7], as: UTF8.self).contains("%3A"))
        #expect(String(decoding: tokenForms[8], as: UTF8.self).contains("%3a"))
        for (index, form) in tokenForms.enumerated() {
            let text = String(decoding: form, as: UTF8.self)
            let json = Array(
                #"{"data":{"k":"\#(text)","url":"https://x.example/p?t=\#(text)&z=1","s":"a \#(text) b"}}"#.utf8)
            let rewrite = try #require(encodings.rewrite(json), "form \(index)")
            #expect(rewrite.owners == [7])
            #expect(!encodings.occurs(in: rewrite.bytes), "form \(index) left")
            // The same form of the pseudonym, three times (for forms that are the same bytes as an earlier
            // form, that earlier form's replacement).
            let first = tokenForms.firstIndex(of: form)!
            let replaced = String(decoding: pseudonymForms[first], as: UTF8.self)
            #expect(
                String(decoding: rewrite.bytes, as: UTF8.self)
                    == #"{"data":{"k":"\#(replaced)","url":"https://x.example/p?t=\#(replaced)&z=1","s":"a \#(replaced) b"}}"#,
                "form \(index)")
        }
    }

    @Test("a padded base64 is replaced whole, not as its unpadded prefix; content naming nothing is nil")
    func longestFormWins() throws {
        let identifier = Array("ab:cd".utf8)  // 5 bytes: base64 "YWI6Y2Q=" has one pad
        var encodings = IdentifierEncodings()
        encodings.add(identifier, replacedBy: Array("erased-x".utf8), owner: 0, shortest: 1)
        let padded = Base64Text.encode(identifier, alphabet: .standard, padded: true)
        let rewrite = try #require(encodings.rewrite(Array("[\"".utf8) + padded + Array("\"]".utf8)))
        let expected = Base64Text.encode(Array("erased-x".utf8), alphabet: .standard, padded: true)
        #expect(rewrite.bytes == Array("[\"".utf8) + expected + Array("\"]".utf8))
        #expect(encodings.rewrite(Array(#"{"k":"nothing here"}"#.utf8)) == nil)
    }

    @Test("an APNs token's hex (either case) and base64 in content become the pseudonym's; owners are reported")
    func apnsTokenAndSeveralOwners() throws {
        let apns = [UInt8](repeating: 0xC4, count: 16) + [UInt8](repeating: 0x5E, count: 16)
        var encodings = IdentifierEncodings()
        encodings.add(Self.token, replacedBy: Self.pseudonym, owner: 0)
        encodings.add(apns, replacedBy: Self.pseudonym, owner: 1)
        let hex = Hex.encode(apns)
        let base64 = Data(apns).base64EncodedString()
        let json = #"{"a":"\#(hex)","b":"\#(hex.uppercased())","c":"\#(base64)"}"#
        let rewrite = try #require(encodings.rewrite(Array(json.utf8)))
        #expect(rewrite.owners == [1])
        let pseudonymHex = Hex.encode(Self.pseudonym)
        #expect(
            String(decoding: rewrite.bytes, as: UTF8.self)
                == #"{"a":"\#(pseudonymHex)","b":"\#(pseudonymHex.uppercased())","c":"\#(Data(Self.pseudonym).base64EncodedString())"}"#
        )
        let both = try #require(
            encodings.rewrite(Array(#"["\#(hex)","\#(String(decoding: Self.token, as: UTF8.self))"]"#.utf8)))
        #expect(both.owners == [0, 1])
    }

    @Test("random identifiers at random places in random text: no form is left, every other byte is kept")
    func randomContent() async {
        await propertyCheck(count: 300, input: Gen.uint64()) { seed in
            var generator = SeededGenerator(seed: seed)
            let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_:.-".utf8)
            let identifier = (0..<Int.random(in: 8...60, using: &generator)).map { _ in
                alphabet.randomElement(using: &generator)!
            }
            var encodings = IdentifierEncodings()
            encodings.add(identifier, replacedBy: Self.pseudonym, owner: 0, shortest: 1)
            let forms = IdentifierEncodings.encodings(of: identifier)
            let filler = Array(" {}\"~!".utf8)
            var content: [UInt8] = []
            var expected: [UInt8] = []
            for _ in 0..<Int.random(in: 1...6, using: &generator) {
                let gap = (0..<Int.random(in: 0...5, using: &generator)).map { _ in
                    filler.randomElement(using: &generator)!
                }
                let index = Int.random(in: 0..<forms.count, using: &generator)
                content += gap + forms[index]
                expected += gap + IdentifierEncodings.encodings(of: Self.pseudonym)[forms.firstIndex(of: forms[index])!]
            }
            let rewrite = encodings.rewrite(content)
            #expect(rewrite?.bytes == expected)
            #expect(rewrite.map { !encodings.occurs(in: $0.bytes) } == true)
        }
    }
}

/// What an erasure searches a content for: never an APNs token's raw bytes, never a form shorter than 16 characters.
@Suite struct IdentifierNeedleTests {
    @Test func anAPNsTokenSpellingJSONDoesNotRewriteEveryMessage() throws {
        var encodings = IdentifierEncodings()
        // 16 bytes that spell `"notification":{` — a device may set any 16 to 200 bytes as its APNs token.
        let apns = Array("\"notification\":{".utf8)
        encodings.add(apns, replacedBy: Array("erased-0123456789abcdef0123456789abcdef".utf8), owner: 0, binary: true)
        #expect(encodings.rewrite(Array(#"{"notification":{"title":"hi"}}"#.utf8)) == nil)
        // Its hex still is a form.
        #expect(encodings.rewrite(Array(Hex.encode(apns).utf8)) != nil)
    }

    @Test func aShortTokenIsNotSearchedForInContents() {
        var encodings = IdentifierEncodings()
        encodings.add(Array("a".utf8), replacedBy: Array("erased-0123456789abcdef0123456789abcdef".utf8), owner: 0)
        #expect(encodings.forms.isEmpty)
        #expect(encodings.rewrite(Array(#"{"data":{"a":"banana"}}"#.utf8)) == nil)
    }
}
