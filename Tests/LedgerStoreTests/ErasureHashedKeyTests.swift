import Crypto
import Foundation
import LedgerCore
import LedgerTestSupport
import Testing

@testable import LedgerStore

/// A token longer than LMDB's key limit is stored under `0x00 ‖ SHA-256(token)` (`NameKey`): a hash anyone holding
/// the token can recompute, so an erasure must take that key away too.
@Suite("Erasure of a hashed token key", .offThePool)
struct ErasureHashedKeyTests {
    @Test("after erasing a 600-byte token no file holds it, nor its SHA-256 (the key it was stored under)")
    func hashedKeyIsGone() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        let long = try RegistrationToken("cLong:APA91b" + String(repeating: "0123456789-_abcdefXYZ", count: 28))
        let kept = try RegistrationToken("dKept:APA91b" + String(repeating: "9876543210_-ABCDEFxyz", count: 28))
        #expect(long.rawValue.utf8.count > NameKey.maximumInlineBytes)
        for token in [long, kept] {
            _ = try await ledger.append(
                WriteRequest(
                    actor: "admin", requestID: "r", operations: [.register(token, platform: "web", appID: nil)]))
        }
        let digest = Array(SHA256.hash(data: Array(long.rawValue.utf8)))
        #expect(!IdentifierSearch.files(under: directory.path, holding: [0] + digest).isEmpty, "the hashed key")

        _ = try await ledger.append(
            WriteRequest(actor: "admin", requestID: "e", operations: [.erase(long, reason: "user request #4411")]))
        #expect(IdentifierSearch.files(under: directory.path, holding: Array(long.rawValue.utf8)) == [])
        #expect(IdentifierSearch.files(under: directory.path, holding: digest) == [])
        #expect(try ledger.read { try $0.instanceID(of: long) } == nil)
        #expect(try ledger.read { try $0.instanceID(of: kept) } != nil)
        let keptDigest = Array(SHA256.hash(data: Array(kept.rawValue.utf8)))
        #expect(!IdentifierSearch.files(under: directory.path, holding: keptDigest).isEmpty)
    }
}
