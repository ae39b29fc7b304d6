import Foundation
import LedgerCore
import LedgerQueries
import LedgerTestSupport
import Testing

@testable import LedgerStore

/// #65: a device may set many APNs tokens with the client key alone; its erasure rewrites every record that names
/// any of them (past the few identifiers below which records used to be searched before being decoded), and every
/// form of each inside contents, and `verify` accounts for all of it.
@Suite("Erasure of a device that held many APNs tokens (#65)", .offThePool)
struct ErasureManyAPNsTokensTests {
    @Test("300 APNs tokens: none left in any file, every record that named one rewritten, verify sound")
    func manyAPNsTokens() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        let erased = ErasureFixture.erased
        let kept = ErasureFixture.kept
        var generator = SeededGenerator(seed: 65)
        let tokens = try (0..<300).map { _ in
            try APNsDeviceToken(bytes: (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }, sandbox: false)
        }
        _ = try await ledger.append(
            ErasureFixture.request([
                .register(erased, platform: "ios", appID: "app"), .register(kept, platform: "ios", appID: "app"),
            ]))
        for chunk in stride(from: 0, to: tokens.count, by: 50) {
            _ = try await ledger.append(
                ErasureFixture.request(tokens[chunk..<(chunk + 50)].map { .setAPNsToken(erased, $0) }, actor: "client"))
        }
        _ = try await ledger.append(ErasureFixture.request([.setAPNsToken(kept, ErasureFixture.apnsToken)]))
        // Topic sends whose data hold an old token in hex, and another in base64url: each is rewritten.
        let forms = IdentifierEncodings.encodings(of: tokens[17].bytes)[1] + Array(",".utf8)
            + IdentifierEncodings.encodings(of: tokens[250].bytes)[6]
        let json = Array(#"{"data":{"t":""#.utf8) + forms + Array(#""}}"#.utf8)
        _ = try await ledger.append(
            ErasureFixture.request([
                .send(.topic(try TopicName("news")), precedence: .leftToRight, messageJSON: json),
                .send(.topic(try TopicName("news")), precedence: .leftToRight, messageJSON: Array(#"{"data":{}}"#.utf8)),
            ]))
        ledger.waitForAudiences()

        _ = try await ledger.append(ErasureFixture.request([.erase(erased, reason: "test")]))
        for (index, token) in tokens.enumerated() where index % 10 == 0 || index == 17 || index == 250 {
            #expect(IdentifierSearch.files(under: directory.path, holding: token.bytes) == [])
        }
        for token in [tokens[17], tokens[250]] {
            for form in IdentifierEncodings.encodings(of: token.bytes).dropFirst() {
                #expect(IdentifierSearch.files(under: directory.path, holding: form) == [])
            }
        }
        #expect(!IdentifierSearch.files(under: directory.path, holding: ErasureFixture.apnsToken.bytes).isEmpty)
        let report = try ledger.verify(checkAudiences: true)
        #expect(report.problems == [])
        // registered, 300 apnsTokenSet, the send naming two of them.
        #expect(report.erasures == 1 && report.redactedEvents == 302)
    }
}
