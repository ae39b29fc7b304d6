import Foundation
import LedgerCore
import LedgerQueries
@testable import LedgerServer
import LedgerStore
import LedgerTestSupport
import Testing

@Suite("A project's checkpoint signer", .offThePool)
struct CheckpointSignerTests {
    func register(_ ledger: Ledger, _ name: String) async throws {
        _ = try await ledger.append(
            WriteRequest(
                actor: "test", requestID: name,
                operations: [.register(try RegistrationToken("device:\(name)"), platform: nil, appID: nil)]))
    }

    /// A ledger in a fresh directory and a checkpoint signer of it, on a worker of its own, for `body`.
    func withSigner(_ body: (Ledger, CheckpointSigner) async throws -> Void) async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        let worker = SerialWorker<BlockingJob, Void>(name: "test-checkpoints")
        defer { worker.stop() }
        let signer = CheckpointSigner(
            keeper: try CheckpointKeeper.open(dataDirectory: directory.path, project: .default), worker: worker,
            logger: quietLogger)
        try await body(ledger, signer)
    }

    @Test("within its second it answers the last checkpoint again; a wait for a larger one ends when one is signed")
    func waitsForTheNextSigned() async throws {
        try await withSigner { ledger, signer in
            try await register(ledger, "a")
            let signedAt = monotonicSeconds()  // at most the signature's time
            let first = try await signer.latest(of: ledger)
            #expect(first.checkpoint.size == 1)
            try await register(ledger, "b")
            try await register(ledger, "c")
            // Within the second: the same note again.
            #expect(try await signer.latest(of: ledger) == first)

            // A wait for size 3 ends when a checkpoint of it is signed (here by the shutdown's signIfGrown, which
            // signs whatever the second), not at the end of the second.
            async let waited: Void = signer.waitForCheckpoint(covering: 3)
            try await signer.signIfGrown(ledger)
            await waited
            #expect(monotonicSeconds() - signedAt < CheckpointSigner.interval)
            let covering = try await signer.latest(of: ledger)
            #expect(covering.checkpoint.size == 3)
            #expect(try covering.checkpoint == signer.keeper.signer.verifier.verify(note: covering.text))
            // Kept in the order signed.
            let keeper = signer.keeper
            #expect(try keeper.kept().map(\.size) == [1, 3])
        }
    }

    @Test("a wait for a checkpoint no one signs ends when the signer may sign again, and then it signs")
    func waitEndsWithTheSecond() async throws {
        try await withSigner { ledger, signer in
            try await register(ledger, "a")
            let signedAt = monotonicSeconds()  // at most the signature's time
            _ = try await signer.latest(of: ledger)
            try await register(ledger, "b")
            await signer.waitForCheckpoint(covering: 2)
            #expect(monotonicSeconds() - signedAt >= CheckpointSigner.interval)
            #expect(try await signer.latest(of: ledger).checkpoint.size == 2)
        }
    }
}
