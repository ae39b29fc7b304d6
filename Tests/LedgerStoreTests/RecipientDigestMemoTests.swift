import Foundation
import LedgerCore
import LedgerTestSupport
import Testing

@testable import LedgerStore

private func set(_ ids: [InstanceID], capacity: Int) -> InstanceSet {
    var set = InstanceSet(capacity: capacity)
    for id in ids { set.insert(id) }
    return set
}

/// Counts how often the memo asks for a digest; each computed digest is distinct (it names the call).
private final class Computations {
    var calls = 0

    func compute(_ members: InstanceSet) -> RecipientDigestMemo.Digest {
        calls += 1
        return RecipientDigestMemo.Digest(count: members.count, digest: [UInt8(calls)])
    }
}

private func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

@Suite("Recipient digest memo")
struct RecipientDigestMemoTests {
    @Test("hasSameMembers ignores capacity and sees one differing id anywhere")
    func sameMembers() {
        let small = set([1, 5, 63], capacity: 64)
        #expect(small.hasSameMembers(as: set([1, 5, 63], capacity: 64 * 40)))
        #expect(set([1, 5, 63], capacity: 64 * 40).hasSameMembers(as: small))
        #expect(small != set([1, 5, 63], capacity: 64 * 40))
        #expect(!small.hasSameMembers(as: set([1, 5], capacity: 64)))
        #expect(!small.hasSameMembers(as: set([1, 5, 63, 64 * 39 + 7], capacity: 64 * 40)))
        #expect(!set([1, 5, 63, 64 * 39 + 7], capacity: 64 * 40).hasSameMembers(as: small))
        #expect(InstanceSet(capacity: 0).hasSameMembers(as: InstanceSet(capacity: 640)))
    }

    @Test("the same members reuse the digest; other members, another rule or a token target compute again")
    func hitsAndMisses() throws {
        let memo = RecipientDigestMemo()
        let computations = Computations()
        let news = MessageTarget.topic(try TopicName("news"))
        let first = memo.digest(of: set([1, 2, 3], capacity: 64), target: news, precedence: .leftToRight) {
            computations.compute($0)
        }
        // A later send with more instances in the ledger (a larger capacity) but the same members.
        let again = memo.digest(of: set([1, 2, 3], capacity: 200), target: news, precedence: .standard) {
            computations.compute($0)
        }
        #expect(again == first)
        #expect(computations.calls == 1)
        let changed = memo.digest(of: set([1, 2, 4], capacity: 200), target: news, precedence: .leftToRight) {
            computations.compute($0)
        }
        #expect(changed != first && changed.count == 3)
        #expect(computations.calls == 2)
        // The first set again: the memo keeps the last audience per target, so this computes again.
        _ = memo.digest(of: set([1, 2, 3], capacity: 200), target: news, precedence: .leftToRight) {
            computations.compute($0)
        }
        #expect(computations.calls == 3)

        let condition = MessageTarget.condition("'a' in topics || 'b' in topics && 'c' in topics")
        _ = memo.digest(of: set([7], capacity: 64), target: condition, precedence: .leftToRight) {
            computations.compute($0)
        }
        _ = memo.digest(of: set([7], capacity: 64), target: condition, precedence: .standard) {
            computations.compute($0)
        }
        #expect(computations.calls == 5)

        let token = MessageTarget.token(try RegistrationToken("device-1"))
        for _ in 0..<3 {
            _ = memo.digest(of: set([9], capacity: 64), target: token, precedence: .leftToRight) {
                computations.compute($0)
            }
        }
        #expect(computations.calls == 8)
        #expect(memo.count == 3)
        #expect(memo.hits == 1 && memo.misses == 5)
    }

    @Test("over its byte budget the memo forgets the least recently used audience, and never holds a larger set")
    func budget() throws {
        let oneSet = 64 * MemoryLayout<UInt64>.stride
        let memo = RecipientDigestMemo(byteBudget: 2 * oneSet)
        let computations = Computations()
        let topics = try ["a", "b", "c"].map { MessageTarget.topic(try TopicName($0)) }
        func digest(_ target: MessageTarget, _ members: [InstanceID], capacity: Int = 64 * 64) {
            _ = memo.digest(of: set(members, capacity: capacity), target: target, precedence: .leftToRight) {
                computations.compute($0)
            }
        }
        digest(topics[0], [1])
        digest(topics[1], [2])
        digest(topics[0], [1])  // a is now the most recently used
        #expect(computations.calls == 2)
        digest(topics[2], [3])  // evicts b
        #expect(memo.count == 2)
        digest(topics[0], [1])
        #expect(computations.calls == 3)
        digest(topics[1], [2])
        #expect(computations.calls == 4)
        // A set larger than the whole budget is computed, not remembered, and evicts nothing.
        let countBefore = memo.count
        digest(topics[2], [3], capacity: 64 * 64 * 3)
        digest(topics[2], [3], capacity: 64 * 64 * 3)
        #expect(computations.calls == 6)
        #expect(memo.count == countBefore)
    }

    @Test("through the ledger: every recorded audience matches a recomputation from the tokens, hits included")
    func recordedDigestsMatchReplay() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        let tokens = try (0..<70).map { try RegistrationToken("memo-\($0):APA91b\($0 &* 7919 % 1000)") }
        let news = try TopicName("news")
        let sports = try TopicName("sports")
        _ = try await ledger.append(
            WriteRequest(
                actor: "test", requestID: "setup",
                operations: tokens[..<60].map { .register($0, platform: nil, appID: nil) }
                    + tokens[..<40].map { .subscribe($0, news, via: .iid) }
                    + tokens[20..<30].map { .subscribe($0, sports, via: .v1) }))
        let condition = MessageTarget.condition("'news' in topics && !('sports' in topics)")
        func send(_ target: MessageTarget, _ precedence: ConditionPrecedence = .leftToRight) -> LedgerOperation {
            .send(target, precedence: precedence, messageJSON: Array("{}".utf8))
        }
        // Each step is one request; its sends' expected recipients are what the step leaves (sends come last
        // in a step unless the step says otherwise).
        let steps: [[LedgerOperation]] = [
            [send(.topic(news)), send(condition)],
            [send(.topic(news)), send(condition), send(condition, .standard)],  // unchanged: hits
            [.unsubscribe(tokens[3], news, via: .v1), send(.topic(news)), send(condition)],
            [.subscribe(tokens[3], news, via: .v1), send(.topic(news))],  // the first set again, since differs
            // New instances (the capacity grows past a word) that join no topic: the audience is unchanged.
            tokens[60...].map { .register($0, platform: nil, appID: nil) } + [send(.topic(news)), send(condition)],
            [.subscribe(tokens[65], news, via: .iid), send(.topic(news)), send(condition)],
            [.unregister(tokens[65], reason: "test"), send(.topic(news)), send(condition)],
        ]
        var members = Set(tokens[..<40].map(\.rawValue))
        var inSports = Set(tokens[20..<30].map(\.rawValue))
        var expected: [UInt64: [String]] = [:]
        for (index, operations) in steps.enumerated() {
            let receipt = try await ledger.append(
                WriteRequest(actor: "test", requestID: "step-\(index)", operations: operations))
            for (operation, outcome) in zip(operations, receipt.outcomes) {
                switch operation {
                case .subscribe(let token, _, _, _): members.insert(token.rawValue)
                case .unsubscribe(let token, _, _, _): members.remove(token.rawValue)
                case .unregister(let token, _):
                    members.remove(token.rawValue)
                    inSports.remove(token.rawValue)
                case .send(let target, _, _):
                    guard case .sent(_, let messageID) = outcome else {
                        Issue.record("step \(index): \(outcome)")
                        continue
                    }
                    let reached = target == .topic(news) ? members : members.subtracting(inSports)
                    expected[messageID] = reached.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
                default: break
                }
            }
        }
        ledger.waitForAudiences()
        #expect(expected.count == 14)
        try ledger.read { snapshot in
            var digests = Set<String>()
            for (messageID, recipients) in expected {
                let replay = try #require(try MessageReplay.replay(messageID, in: snapshot))
                let recorded = try #require(replay.recorded?.record)
                #expect(hex(recorded.recipientDigest) == sha256Hex(recipients.map { $0 + "\n" }.joined()))
                #expect(recorded.recipientCount == UInt64(recipients.count))
                #expect(replay.matchesRecord)
                digests.insert(hex(recorded.recipientDigest))
            }
            // Three audiences of news (40, 39 and 41 members) and three of the condition (30, 29 and 31), each
            // sent to more than once: the memo's hits gave the digests a recomputation gives.
            #expect(digests.count == 6)
        }
        // Of the 14 sends, three found the last audience of their target (and rule) unchanged — news and the
        // condition in step 1, news in step 4 — and reused its digest, checked above like every other.
        let reuse = ledger.audienceDigestReuse
        #expect(reuse.reused == 3 && reuse.hashed == 11)
    }
}
