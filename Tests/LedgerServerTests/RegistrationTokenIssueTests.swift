import Foundation
import LedgerCore
import Testing

@testable import LedgerServer

@Suite("Issued registration tokens")
struct RegistrationTokenIssueTests {
    @Test("base64url by hand is Foundation's base64 with - for +, _ for / and no padding, at every length")
    func base64URLMatchesFoundation() {
        var generator = SystemRandomNumberGenerator()
        for length in 0..<40 {
            for _ in 0..<20 {
                let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
                var output: [UInt8] = []
                RegistrationToken.appendBase64URL(bytes[...], to: &output)
                let expected = Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                    .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
                #expect(String(decoding: output, as: UTF8.self) == expected, "\(bytes)")
            }
        }
    }

    @Test("a token is 16 random bytes, ':APA91b' and 96 more, starts with c to f, and is never issued twice")
    func shape() {
        var seen = Set<String>()
        for _ in 0..<2000 {
            let token = RegistrationToken.issue().rawValue
            let parts = token.split(separator: ":", omittingEmptySubsequences: false)
            #expect(parts.count == 2)
            #expect(parts[0].count == 22 && parts[1].count == 6 + 128, "\(token)")
            #expect(parts[1].hasPrefix("APA91b"))
            #expect("cdef".contains(token.first!))
            #expect(seen.insert(token).inserted)
        }
    }
}
