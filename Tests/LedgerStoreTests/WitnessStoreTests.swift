import Crypto
import Foundation
import LedgerCore
import LedgerQueries
import LedgerTestSupport
import Testing

/// `ledger witness`'s store: evidence is what a third party can check — two checkpoints the log signed, of one
/// size, with different roots — kept once per pair, with the log's signature lines only, up to a byte limit.
@Suite("Witness store", .offThePool)
struct WitnessStoreTests {
    private static let origin = "example.com/log"
    private static let log = try! NoteSigner(name: origin, key: Curve25519.Signing.PrivateKey())
    private static let stranger = try! NoteSigner(name: "someone.else/key", key: Curve25519.Signing.PrivateKey())
    private static let cosigner = try! Cosigner(name: "witness.example/w1", seed: [UInt8](repeating: 9, count: 32))
    private static let keys = [origin: [log.verifier]]

    /// A checkpoint of `size` whose leaves are named by `fork`, signed by the log and, when `padded`, by a stranger.
    private static func note(size: Int, fork: String = "", padded: Bool = false) throws -> SignedNote {
        let leaves = (0..<size).map { MerkleHash.leaf(Array("\(fork)leaf \($0)".utf8)) }
        let root = try MerkleTree(size: UInt64(size), source: InMemoryMerkleLeaves(leaves: leaves)).root()
        let checkpoint = Checkpoint(origin: origin, size: UInt64(size), root: root)
        let signed = try SignedNote(parsing: log.sign(checkpoint))
        guard padded else { return signed }
        let foreign = try SignedNote(parsing: stranger.sign(checkpoint))
        return signed.adding(foreign.signatureLines)
    }

    private func add(_ store: WitnessStore, old: UInt64, _ note: SignedNote, proof: [[UInt8]] = []) throws
        -> WitnessStore.Outcome
    {
        try store.add(
            AddCheckpointRequest(oldSize: old, proof: proof, note: note), logKeys: Self.keys, cosigner: Self.cosigner,
            time: 1_800_000_000)
    }

    @Test("a fork at the cosigned size is kept once, with the log's lines only; a proof that fails keeps nothing")
    func evidenceOnce() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try WitnessStore(directory: directory.path)
        #expect(try add(store, old: 0, Self.note(size: 4, padded: true)).decision == .cosign)
        let held = try #require(try store.latest(origin: Self.origin))
        #expect(!held.note.contains("someone.else/key"), "the latest note keeps no unknown key's line")
        let junk: [[UInt8]] = [Array(repeating: 1, count: 32)]
        #expect(try add(store, old: 4, Self.note(size: 4), proof: junk).decision == .badProof)
        #expect(try add(store, old: 4, Self.note(size: 9), proof: junk).decision == .badProof)
        #expect(try store.evidence().isEmpty)
        // The log's own line fifty times, and a stranger's: the log's line is kept once.
        let padded = try Self.note(size: 4, fork: "b", padded: true)
        let fork = try SignedNote(
            parsing: padded.body + "\n" + String(repeating: padded.signatureLines[0] + "\n", count: 50)
                + padded.signatureLines[1] + "\n")
        let first = try add(store, old: 4, fork)
        #expect(first.decision == .differentRoot && first.newEvidence)
        let again = try add(store, old: 4, fork)
        #expect(again.decision == .differentRoot && !again.newEvidence)
        let evidence = try store.evidence()
        #expect(evidence.count == 1)
        #expect(evidence.first?.submittedNote == (try Self.note(size: 4, fork: "b")).text)
        #expect(evidence.first?.heldNote == held.note)
        let counters = try store.counters()
        #expect(counters.evidence == 1 && counters.evidenceBytes > 0 && counters.evidenceDropped == 0)
    }

    @Test("past the byte limit a fork is counted, not kept")
    func limit() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try WitnessStore(directory: directory.path, evidenceByteLimit: 2_000)
        #expect(try add(store, old: 0, Self.note(size: 4)).decision == .cosign)
        var kept = 0
        for fork in 0..<10 {
            let outcome = try add(store, old: 4, Self.note(size: 4, fork: "f\(fork)"))
            #expect(outcome.decision == .differentRoot && outcome.newEvidence)
            kept = try store.evidence().count
        }
        let counters = try store.counters()
        #expect(kept > 0 && kept < 10)
        #expect(counters.evidence == kept && counters.evidenceBytes <= 2_000)
        #expect(counters.evidenceDropped == UInt64(10 - kept))
        // A pair counted past the limit, shown again, is not counted again.
        let replayed = try add(store, old: 4, Self.note(size: 4, fork: "f9"))
        #expect(replayed.decision == .differentRoot && !replayed.newEvidence)
        #expect(try store.counters().evidenceDropped == UInt64(10 - kept))
    }
}
