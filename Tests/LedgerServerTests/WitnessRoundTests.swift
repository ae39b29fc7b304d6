import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import LedgerCore
@testable import LedgerServer
import LedgerTestSupport
import Synchronization
import Testing

@Suite("A project's witness rounds", .timeLimit(.minutes(1)))
struct WitnessRoundTests {
    /// Two C2SP witnesses on one live socket, at `/slow` and `/fast`: each cosigns whatever it is given, the slow
    /// one after `slowDelay` for the sizes in `slowSizes`. Each counts its submissions and the most it ever held at
    /// once, and tells `received` of each submission as it arrives.
    final class StandIns: Sendable {
        struct Counts: Sendable {
            var inFlight = 0
            var mostAtOnce = 0
            var submissions = 0
        }

        static let slowDelay = Duration.milliseconds(800)
        let slow = try! Cosigner(name: "slow.example", seed: [UInt8](repeating: 7, count: 32))
        let fast = try! Cosigner(name: "fast.example", seed: [UInt8](repeating: 8, count: 32))
        let slowSizes: Set<UInt64>
        let counts = Mutex<[String: Counts]>([:])
        let received: AsyncStream<(witness: String, size: UInt64)>
        private let receivedContinuation: AsyncStream<(witness: String, size: UInt64)>.Continuation

        init(slowSizes: Set<UInt64>) {
            self.slowSizes = slowSizes
            (received, receivedContinuation) = AsyncStream.makeStream()
        }

        func counts(of witness: String) -> Counts { counts.withLock { $0[witness] ?? Counts() } }

        var router: Router<BasicRequestContext> {
            let router = Router()
            for (path, cosigner) in [("slow", slow), ("fast", fast)] {
                router.post("\(path)/add-checkpoint") { request, _ -> String in
                    let body = try await request.body.collect(upTo: 64 * 1024)
                    let parsed = try AddCheckpointRequest(parsing: String(buffer: body))
                    self.counts.withLock { counts in
                        counts[path, default: Counts()].inFlight += 1
                        counts[path, default: Counts()].submissions += 1
                        counts[path]!.mostAtOnce = max(counts[path]!.mostAtOnce, counts[path]!.inFlight)
                    }
                    defer { self.counts.withLock { $0[path, default: Counts()].inFlight -= 1 } }
                    self.receivedContinuation.yield((path, parsed.note.checkpoint.size))
                    if path == "slow", self.slowSizes.contains(parsed.note.checkpoint.size) {
                        try await Task.sleep(for: Self.slowDelay)
                    }
                    return try cosigner.cosign(parsed.note, time: 1_700_000_000) + "\n"
                }
            }
            return router
        }

        func requirement(port: Int) throws -> WitnessRequirement {
            try WitnessRequirement(witnesses: [
                .init(url: "http://127.0.0.1:\(port)/slow", key: slow.verifier),
                .init(url: "http://127.0.0.1:\(port)/fast", key: fast.verifier),
            ])
        }
    }

    let log = try! NoteSigner(name: "log.example", key: Curve25519.Signing.PrivateKey())

    /// The log's signed checkpoint of `size` (its root made up: the stand-ins check no proof).
    func signed(_ size: UInt64) throws -> SignedNote {
        let root = Array(SHA256.hash(data: Array("root \(size)".utf8)))
        return try SignedNote(parsing: try log.sign(Checkpoint(origin: "log.example", size: size, root: root)))
    }

    /// The stand-ins served on a free port, and a project's witnesses asking them.
    func live(_ standIns: StandIns, _ body: @escaping @Sendable (CheckpointWitnesses) async throws -> Void)
        async throws
    {
        let app = Application(
            router: standIns.router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            logger: quietLogger)
        try await app.test(.live) { client in
            try await body(
                CheckpointWitnesses(
                    requirement: try standIns.requirement(port: try #require(client.port)), lastCosigned: nil,
                    logger: quietLogger))
        }
    }

    /// Waits for the stand-ins to tell of a submission of `size` to `witness`.
    func arrival(of size: UInt64, at witness: String, in standIns: StandIns) async {
        for await arrival in standIns.received where arrival.witness == witness && arrival.size == size { return }
    }

    @Test("a newer checkpoint asked in a slow round waits: no witness is asked twice at once; latest only grows")
    func slowThenFast() async throws {
        let standIns = StandIns(slowSizes: [5])
        try await live(standIns) { witnesses in
            let kept = Mutex<[UInt64]>([])
            let keep: @Sendable (SignedNote) async throws -> Void = { note in
                kept.withLock { $0.append(note.checkpoint.size) }
            }
            let five = try signed(5)
            let ten = try signed(10)
            // Size 5 goes first, and the slow witness holds it; size 10 is asked while it does.
            async let first = witnesses.cosigned(five, proof: { _ in [] }, keep: keep)
            await arrival(of: 5, at: "slow", in: standIns)
            let second = await witnesses.cosigned(ten, proof: { _ in [] }, keep: keep)
            let firstAnswer = await first

            #expect(standIns.counts(of: "slow").mostAtOnce == 1)
            #expect(standIns.counts(of: "fast").mostAtOnce == 1)
            #expect(firstAnswer?.checkpoint.size == 5)
            #expect(second?.checkpoint.size == 10)
            #expect(await witnesses.latest?.checkpoint.size == 10)
            #expect(witnesses.report.withLock { $0.cosignedSize } == 10)
            // Kept in the order cosigned, and each with both witnesses' lines.
            #expect(kept.withLock { $0 } == [5, 10])
            let latest = try #require(await witnesses.latest)
            #expect(CosignatureVerifier.count([standIns.slow.verifier, standIns.fast.verifier], on: latest) == 2)
            // An older checkpoint asked afterwards is answered with the latest, not submitted.
            #expect(await witnesses.cosigned(five, proof: { _ in [] }, keep: keep)?.checkpoint.size == 10)
            #expect(standIns.counts(of: "slow").submissions == 2)
        }
    }

    @Test("the same checkpoint asked during its round joins it: each witness is asked once")
    func joined() async throws {
        let standIns = StandIns(slowSizes: [7])
        try await live(standIns) { witnesses in
            let seven = try signed(7)
            async let first = witnesses.cosigned(seven, proof: { _ in [] }, keep: { _ in })
            await arrival(of: 7, at: "slow", in: standIns)
            let second = await witnesses.cosigned(seven, proof: { _ in [] }, keep: { _ in })
            #expect(await first?.checkpoint.size == 7)
            #expect(second?.checkpoint.size == 7)
            #expect(standIns.counts(of: "slow").submissions == 1)
            #expect(standIns.counts(of: "fast").submissions == 1)
        }
    }
}
