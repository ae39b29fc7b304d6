import Foundation
import LedgerCore
import LedgerTestSupport
import PropertyBased
import Testing

@Suite("Reason identifiers", .offThePool)
struct ReasonIdentifiersTests {
    /// A token of the shape the server issues (`RegistrationToken.issue()`, in LedgerServer): 16 bytes whose first
    /// starts with 0111 and 96 more, each base64url, joined by `:APA91b`.
    static func issuedShape(using generator: inout SeededGenerator) -> String {
        var bytes = (0..<112).map { _ in UInt8.random(in: 0...255, using: &generator) }
        bytes[0] = 0b0111_0000 | (bytes[0] & 0x0F)
        let encode = { (part: ArraySlice<UInt8>) in
            String(decoding: Base64Text.encode(part, alphabet: .url, padded: false), as: UTF8.self)
        }
        return encode(bytes[..<16]) + ":APA91b" + encode(bytes[16...])
    }

    /// The rule alone, as with a ledger that knows no token.
    static func refusal(_ reason: String, erasing: [String] = [], known: Set<String> = [], apns: Set<[UInt8]> = [])
        throws -> ReasonIdentifiers.Rule?
    {
        try ReasonIdentifiers(reason).refusal(
            erasing: erasing.map { try RegistrationToken($0) }, isKnownToken: { known.contains($0.rawValue) },
            holdsAnyAPNsToken: { !$0.isDisjoint(with: apns) })?.rule
    }

    @Test("prose reasons pass: dates, ticket numbers, URLs, article numbers, long sentences")
    func prosePasses() throws {
        for reason in [
            "user request 2026-12-01 ticket #4411", "GDPR Art. 17, ticket 4711", "account closed",
            "See https://support.example.com/tickets/4411?from=mail#note-2 (DPO: j.doe@example.com)",
            "Löschung auf Wunsch der Nutzerin gemäß Art. 17 DSGVO, Vorgang 2026/12/01-4411",
            "right-to-be-forgotten request via support/ops, ref. ABC-123-XYZ",
            String(repeating: "words of an ordinary reason ", count: 36),
        ] {
            #expect(try Self.refusal(reason) == nil, "\(reason)")
        }
    }

    @Test("every token of the issued shape, and its hex, base64, base64url and percent-encoding, is token-shaped")
    func issuedTokensAreTokenShaped() async {
        await propertyCheck(count: 500, input: Gen.uint64()) { seed in
            var generator = SeededGenerator(seed: seed)
            let token = Self.issuedShape(using: &generator)
            #expect(token.utf8.count == 157)
            for form in IdentifierEncodings.encodings(of: Array(token.utf8)) {
                let text = String(decoding: form, as: UTF8.self)
                #expect(ReasonIdentifiers("asked by " + text + ".").tokenShapedRun != nil, "\(text.prefix(12))")
            }
        }
    }

    @Test("every APNs token length accepted (16 to 200 bytes) is token-shaped in hex; in base64 from 24 bytes")
    func apnsTokensAreTokenShaped() throws {
        var generator = SeededGenerator(seed: 65)
        for count in APNsDeviceToken.byteRange {
            let bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
            for hex in [Hex.encode(bytes), Hex.encode(bytes).uppercased()] {
                #expect(try Self.refusal("apns " + hex) == .tokenShaped, "\(count) bytes")
            }
            let base64 = Data(bytes).base64EncodedString()
            #expect((try Self.refusal("apns " + base64) == .tokenShaped) == (count >= 24), "\(count) bytes")
        }
    }

    @Test("a token being erased is refused in any form, anywhere, even when short")
    func erasedTokenInAnyForm() throws {
        for form in IdentifierEncodings.encodings(of: Array("tok:1".utf8)) {
            let text = String(decoding: form, as: UTF8.self)
            #expect(try Self.refusal("asked by x\(text)x", erasing: ["tok:1"]) == .quotesErasedToken, "\(text)")
        }
    }

    @Test("a token or APNs token the project knows is refused in text, hex, base64 and percent-encoding")
    func knownIdentifiers() throws {
        let known: Set<String> = ["dev-7:a", "short"]
        #expect(try Self.refusal("asked by dev-7:a.", known: known) == .quotesKnownIdentifier)
        #expect(try Self.refusal("asked by (short)", known: known) == .quotesKnownIdentifier)
        #expect(try Self.refusal("asked by dev-7%3Aa", known: known) == .quotesKnownIdentifier)
        #expect(try Self.refusal("hex " + Hex.encode(Array("short".utf8)), known: known) == .quotesKnownIdentifier)
        let base64 = Data("dev-7:a".utf8).base64EncodedString()
        #expect(try Self.refusal("b64 " + base64, known: known) == .quotesKnownIdentifier)
        #expect(try Self.refusal("b64 " + base64.replacingOccurrences(of: "=", with: ""), known: known) != nil)
        // Not known: the same reasons pass.
        #expect(try Self.refusal("asked by dev-7:a.") == nil)
        #expect(try Self.refusal("shortly after") == nil)
        // A 16-byte APNs token in base64 is 22 characters, shorter than a run: found by the lookup.
        let apns = [UInt8](repeating: 0xC4, count: 8) + [UInt8](repeating: 0x5E, count: 8)
        let encoded = Data(apns).base64EncodedString()
        #expect(try Self.refusal("apns \(encoded)", apns: [apns]) == .quotesKnownIdentifier)
        #expect(try Self.refusal("apns \(encoded)") == nil)
    }

    @Test("the refusal names the rule, never the text")
    func messages() throws {
        let token = "cAbCdEfGhIjKlMnOpQrStU:APA91b" + String(repeating: "Zz09-_", count: 20)
        let rule = try #require(try Self.refusal("by " + token))
        #expect(rule == .tokenShaped && rule.message.contains("32 or more characters"))
        #expect(!rule.message.contains("Zz09"))
    }
}
