import Foundation
import LedgerCore
import LedgerTestSupport
import Testing

@testable import LedgerStore
import LedgerQueries

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

@Suite("Recipient digest memo", .offThePool)
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
        let first = memo.digest(of: set([1, 2, 3], capacity: 64), target: news, precedence: .leftToRight, at: 1) {
            computations.compute($0)
        }
        // A later send with more instances in the ledger (a larger capacity) but the same members.
        let again = memo.digest(of: set([1, 2, 3], capacity: 200), target: news, precedence: .standard, at: 2) {
            computations.compute($0)
        }
        #expect(again == first)
        #expect(computations.calls == 1)
        let changed = memo.digest(of: set([1, 2, 4], capacity: 200), target: news, precedence: .leftToRight, at: 3) {
            computations.compute($0)
        }
        #expect(changed != first && changed.count == 3)
        #expect(computations.calls == 2)
        // The first set again: the memo keeps the last audience per target, so this computes again.
        _ = memo.digest(of: set([1, 2, 3], capacity: 200), target: news, precedence: .leftToRight, at: 4) {
            computations.compute($0)
        }
        #expect(computations.calls == 3)

        let condition = MessageTarget.condition("'a' in topics || 'b' in topics && 'c' in topics")
        _ = memo.digest(of: set([7], capacity: 64), target: condition, precedence: .leftToRight, at: 5) {
            computations.compute($0)
        }
        _ = memo.digest(of: set([7], capacity: 64), target: condition, precedence: .standard, at: 6) {
            computations.compute($0)
        }
        #expect(computations.calls == 5)

        let token = MessageTarget.token(try RegistrationToken("device-1"))
        for _ in 0..<3 {
            _ = memo.digest(of: set([9], capacity: 64), target: token, precedence: .leftToRight, at: 7) {
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
            _ = memo.digest(of: set(members, capacity: capacity), target: target, precedence: .leftToRight, at: 8) {
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

    @Test("through the ledger: every recorded audience matches a recomputation from the devices, hits included")
    func recordedDigestsMatchReplay() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        // Every audience through the recorder, whose memo this is (small ones are otherwise recorded with their
        // sends: ``Ledger/Options/inlineAudienceLimit``).
        let ledger = try openTestLedger(directory) { $0.inlineAudienceLimit = 0 }
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
            // The recorder catches up before the next step's changes, so that which sends reuse a digest without
            // reading is decided (a lagging recorder sees the next change and reads, then compares).
            ledger.waitForAudiences()
            for (operation, outcome) in zip(operations, receipt.outcomes) {
                switch operation {
                case .subscribe(let token, _, _, _): members.insert(token.rawValue)
                case .unsubscribe(let token, _, _, _): members.remove(token.rawValue)
                case .unregister(let token, _):
                    members.remove(token.rawValue)
                    inSports.remove(token.rawValue)
                case .send(let target, _, _, _):
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
                // Tokens register in their order: `tokens[i]` is device i + 1.
                let devices = recipients.map { token in tokens.firstIndex { $0.rawValue == token }! + 1 }
                #expect(hex(recorded.recipientDigest) == deviceDigestHex(devices))
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
        // News's two were reused without reading its members: none had changed since its last send (steps 1
        // and 4; step 4's registrations join no topic).
        let reuse = ledger.audienceDigestReuse
        #expect(reuse.reused == 3 && reuse.unread == 2 && reuse.hashed == 11)
    }
}

@Suite("Topic change tracker: reusing a topic's audience without reading it", .offThePool)
struct TopicChangeTrackerTests {
    let news = try! TopicName("news")
    let sports = try! TopicName("sports")
    let token = try! RegistrationToken("tracker-1:APA91b")

    func request(_ operations: [LedgerOperation]) -> WriteRequest {
        WriteRequest(actor: "test", requestID: "r", operations: operations)
    }

    @Test(
        "dates what may have changed, never earlier: the head at open, a batch's topics, every topic on unregistration")
    func dating() {
        let tracker = TopicChangeTracker(head: 40)
        #expect(tracker.lastChange(of: news) == 40)
        tracker.noteChanges(
            of: [request([.register(token, platform: nil, appID: nil), .acknowledge(token, through: 3)])], through: 50)
        tracker.noteChanges(
            of: [request([.send(.topic(news), precedence: .standard, messageJSON: [])])], through: 51)
        #expect(tracker.lastChange(of: news) == 40)
        tracker.noteChanges(
            of: [request([.subscribe(token, news, via: .iid)]), request([.unsubscribe(token, news, via: .v1)])],
            through: 60)
        #expect(tracker.lastChange(of: news) == 60)
        // A later batch never moves a date back.
        tracker.noteChanges(of: [request([.subscribe(token, news, via: .iid)])], through: 55)
        #expect(tracker.lastChange(of: news) == 60)
        tracker.noteChanges(of: [request([.unregister(token, reason: "test")])], through: 70)
        #expect(tracker.lastChange(of: news) == 70)
        #expect(tracker.lastChange(of: sports) == 70)
    }

    @Test(
        "the memo reuses a topic's digest unread only from an audience taken at or before the send and after its last change"
    )
    func unchangedDigest() {
        let memo = RecipientDigestMemo()
        let tracker = TopicChangeTracker(head: 10)
        var members = InstanceSet(capacity: 64)
        members.insert(3)
        var computed = 0
        let digest = memo.digest(of: members, target: .topic(news), precedence: .standard, at: 20) { set in
            computed += 1
            return RecipientDigestMemo.Digest(count: set.count, digest: [1])
        }
        #expect(computed == 1)
        #expect(memo.unchangedDigest(of: news, at: 25, changes: tracker) == digest)
        #expect(memo.unchangedDigest(of: sports, at: 25, changes: tracker) == nil)
        // An audience taken later than the send says nothing of the send's.
        #expect(memo.unchangedDigest(of: news, at: 15, changes: tracker) == nil)
        // The entry now stands for seq 25; a change at 26 makes it unusable until the members are read again.
        tracker.noteChanges(of: [request([.subscribe(token, news, via: .iid)])], through: 26)
        #expect(memo.unchangedDigest(of: news, at: 27, changes: tracker) == nil)
        #expect(memo.unreadHits == 1)
        _ = memo.digest(of: members, target: .topic(news), precedence: .standard, at: 27) { _ in
            Issue.record("the same members are compared, not hashed")
            return digest
        }
        #expect(memo.unchangedDigest(of: news, at: 28, changes: tracker) == digest)
        #expect(memo.unreadHits == 2 && memo.hits == 1 && memo.misses == 1)
    }

    @Test("through the ledger, concurrent batches of changes and sends: every recorded audience matches its replay")
    func randomBatches() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory) { $0.inlineAudienceLimit = 0 }
        let history = RandomHistory(tokenCount: 24, topicCount: 3)
        _ = try await ledger.append(
            WriteRequest(
                actor: "test", requestID: "setup",
                operations: history.tokens.map { .register($0, platform: nil, appID: nil) }
                    + history.tokens.indices.map { .subscribe(history.tokens[$0], history.topics[$0 % 3], via: .iid) }))
        var generator = SeededGenerator(seed: 77)
        var rounds: [[WriteRequest]] = []
        for round in 0..<60 {
            // Mostly sends to the topics, so that audiences repeat; changes now and then, of every kind.
            rounds.append(
                (0..<Int.random(in: 1...6, using: &generator)).map { index in
                    let operations = (0..<Int.random(in: 1...3, using: &generator)).map { _ -> LedgerOperation in
                        let topic = history.topics.randomElement(using: &generator)!
                        guard Int.random(in: 0..<100, using: &generator) < 25 else {
                            return .send(.topic(topic), precedence: .standard, messageJSON: Array("{}".utf8))
                        }
                        return history.operation(using: &generator)
                    }
                    return WriteRequest(actor: "test", requestID: "r\(round)-\(index)", operations: operations)
                })
        }
        var messageIDs: [UInt64] = []
        for (round, requests) in rounds.enumerated() {
            // Concurrent appends share group-commit batches, and the recorder runs beside them (caught up
            // every other round, so that some sends find their topic unchanged since the last audience).
            if round % 2 == 0 { ledger.waitForAudiences() }
            let receipts = try await withThrowingTaskGroup(of: WriteReceipt.self) { group in
                for request in requests { group.addTask { try await ledger.append(request) } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            for receipt in receipts {
                for case .sent(_, let messageID) in receipt.outcomes { messageIDs.append(messageID) }
            }
        }
        ledger.waitForAudiences()
        try ledger.read { snapshot in
            for messageID in messageIDs {
                let replay = try #require(try MessageReplay.replay(messageID, in: snapshot))
                #expect(replay.matchesRecord, "message \(messageID) at seq \(replay.seq)")
            }
        }
        let reuse = ledger.audienceDigestReuse
        #expect(messageIDs.count > 200)
        #expect(reuse.reused + reuse.hashed == messageIDs.count)
        // Both paths ran: reuse without reading, and hashing after a change.
        #expect(reuse.unread > 20 && reuse.hashed > 20)
    }
}
