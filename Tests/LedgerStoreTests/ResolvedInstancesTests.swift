import Foundation
import LedgerCore
@testable import LedgerStore
import LedgerTestSupport
import Testing

/// A large request's tokens are resolved to instance ids before it is queued (`WriteRequest.resolvedInstances`),
/// so the writer does not search `tokens` for them. The outcomes with and without that are compared by the
/// batching property suite (`LedgerPropertyTests`, requests of 97 operations); this checks what is resolved.
@Suite("Tokens resolved before queueing", .offThePool)
struct ResolvedInstancesTests {
    @Test(
        "each operation gets its token's id from a snapshot, unregistered tokens included; unknown tokens and operations without a token get none"
    )
    func resolvesFromSnapshot() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        let first = try RegistrationToken("first:APA91b")
        let second = try RegistrationToken("second:APA91b")
        let unknown = try RegistrationToken("unknown:APA91b")
        let topic = try TopicName("news")
        _ = try await ledger.append(
            WriteRequest(
                actor: "test", requestID: "setup",
                operations: [
                    .register(first, platform: nil, appID: nil), .register(second, platform: nil, appID: nil),
                    .unregister(second, reason: "test"),
                ]))
        let ids = try ledger.read { snapshot in
            (try snapshot.instanceID(of: first), try snapshot.instanceID(of: second))
        }
        let firstID = try #require(ids.0)
        let secondID = try #require(ids.1)
        #expect(firstID != secondID)

        let operations: [LedgerOperation] = [
            .subscribe(first, topic, via: .iid), .subscribe(second, topic, via: .iid),
            .subscribe(unknown, topic, via: .iid), .send(.topic(topic), precedence: .standard, messageJSON: []),
            .acknowledge(first, through: 1), .register(second, platform: nil, appID: nil),
        ]
        #expect(ledger.resolvedInstances(of: operations) == [firstID, secondID, nil, nil, firstID, secondID])
    }

    @Test(
        "a request of at least the threshold's size is resolved and applied with the writer's own decisions: a token registered earlier in the same request, one unregistered, and one registered again"
    )
    func largeRequestOutcomes() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        let tokens = try (0..<Ledger.resolveTokensBeforeQueueing).map { try RegistrationToken("device-\($0):APA91b") }
        let late = try RegistrationToken("late:APA91b")
        let topic = try TopicName("news")
        _ = try await ledger.append(
            WriteRequest(
                actor: "test", requestID: "setup",
                operations: tokens.map { .register($0, platform: nil, appID: nil) } + [
                    .unregister(tokens[1], reason: "test")
                ]))
        let operations: [LedgerOperation] =
            tokens.map { .subscribe($0, topic, via: .iid) } + [
                .register(late, platform: nil, appID: nil), .subscribe(late, topic, via: .iid),
                .register(tokens[1], platform: nil, appID: nil), .subscribe(tokens[1], topic, via: .iid),
            ]
        #expect(operations.count >= Ledger.resolveTokensBeforeQueueing)
        let receipt = try await ledger.append(WriteRequest(actor: "test", requestID: "large", operations: operations))
        let rejected = receipt.outcomes.indices.filter { receipt.outcomes[$0].rejection != nil }
        // Only the subscribe of the unregistered token, before it registers again, is refused.
        #expect(rejected == [1])
        let members = try ledger.read { snapshot in
            try (tokens + [late]).map { token in
                let instance = try #require(try snapshot.instanceID(of: token))
                return try snapshot.topics(of: instance).map { try snapshot.topicName(of: $0) }
            }
        }
        #expect(members.count == tokens.count + 1)
        #expect(members.allSatisfy { $0 == [topic] })
    }

    @Test(
        "the writer takes a resolved id as given, without searching tokens: a request that carries another instance's id (which only code in the store can set) subscribes that instance"
    )
    func writerTakesResolvedIDs() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        let named = try RegistrationToken("named:APA91b")
        let other = try RegistrationToken("other:APA91b")
        let topic = try TopicName("news")
        _ = try await ledger.append(
            WriteRequest(
                actor: "test", requestID: "setup",
                operations: [.register(named, platform: nil, appID: nil), .register(other, platform: nil, appID: nil)]))
        let otherID = try #require(try ledger.read { try $0.instanceID(of: other) })
        // Below the threshold, `append` leaves what the request carries.
        var request = WriteRequest(actor: "test", requestID: "wired", operations: [.subscribe(named, topic, via: .iid)])
        request.resolvedInstances = [otherID]
        _ = try await ledger.append(request)
        let topics = try ledger.read { snapshot in
            try [named, other].map { token in
                try snapshot.topics(of: #require(try snapshot.instanceID(of: token))).count
            }
        }
        #expect(topics == [0, 1])
    }

    @Test(
        "looked up together in key order, tokens get what each gets alone: registered, unregistered, unknown, repeated, missing, and stored under their hash"
    )
    func batchLookupMatchesOneByOne() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        var random = SystemRandomNumberGenerator()
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_:.-")
        // Registered tokens begin with `r`, unknown ones with `u`: no unknown token can be a registered one.
        func token(_ first: Character, length: Int) throws -> RegistrationToken {
            try RegistrationToken(String([first] + (1..<length).map { _ in alphabet.randomElement(using: &random)! }))
        }
        // Short and long inline keys (prefixes of each other too), and keys over LMDB's 511 bytes.
        var registered: [RegistrationToken] = []
        for _ in 0..<300 { registered.append(try token("r", length: Int.random(in: 1...200, using: &random))) }
        for _ in 0..<5 { registered.append(try token("r", length: Int.random(in: 512...4096, using: &random))) }
        for index in 0..<20 { registered.append(try RegistrationToken(registered[index].rawValue + "x")) }
        _ = try await ledger.append(
            WriteRequest(
                actor: "test", requestID: "setup",
                operations: registered.map { LedgerOperation.register($0, platform: nil, appID: nil) }
                    + registered.prefix(10).map { LedgerOperation.unregister($0, reason: "test") }))
        var unknown: [RegistrationToken] = []
        for _ in 0..<50 { unknown.append(try token("u", length: Int.random(in: 1...600, using: &random))) }
        var asked: [RegistrationToken?] = registered + unknown + Array(registered.prefix(30))
        asked += [nil, nil]
        asked.shuffle(using: &random)
        let (together, alone) = try ledger.read { snapshot in
            let alone = try asked.map { (token: RegistrationToken?) -> InstanceID? in
                guard let token else { return nil }
                return try snapshot.instanceID(of: token)
            }
            return (try snapshot.instanceIDs(of: asked), alone)
        }
        #expect(together == alone)
        #expect(alone.compactMap { $0 }.count == registered.count + 30)
    }
}
