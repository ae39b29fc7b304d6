import Foundation
import LMDBKit
import LedgerCore
import LedgerTestSupport
import Testing

@testable import LedgerStore
import LedgerQueries

/// The test's own model of who holds what: plain dictionaries updated by the rules of SPEC §2.1, with no
/// fold, no index and no bitmap.
private struct Model {
    var registered: Set<String> = []
    var topics: [String: Set<String>] = [:]

    /// Applies an operation the way the store should; returns whether the store should accept it.
    mutating func apply(_ operation: LedgerOperation) -> Bool {
        switch operation {
        case .register(let token, _, _):
            return registered.insert(token.rawValue).inserted
        case .unregister(let token, _):
            guard registered.remove(token.rawValue) != nil else { return false }
            topics[token.rawValue] = nil
            return true
        case .subscribe(let token, let topic, _, _):
            guard registered.contains(token.rawValue) else { return false }
            topics[token.rawValue, default: []].insert(topic.rawValue)
            return true
        case .unsubscribe(let token, let topic, _, _):
            guard registered.contains(token.rawValue) else { return false }
            topics[token.rawValue]?.remove(topic.rawValue)
            return true
        case .send(.token(let token), _, _, _):
            return registered.contains(token.rawValue)
        case .send, .recordAudience, .acknowledge, .recordPushProgress:
            return true
        case .setAPNsToken, .clearAPNsToken, .followLiveActivity, .unfollowLiveActivity, .setPushToStartToken,
            .endLiveActivities:
            // This model registers no ios instances; the workloads here set no APNs or ActivityKit tokens.
            return false
        case .erase, .forgetContents, .recordLiveActivityChannelCreated, .recordLiveActivityChannelDeleted:
            // The workloads here erase and forget nothing (ErasureTests and RetentionTests do).
            return false
        }
    }

    /// Who a send to `target` reaches now, in byte order.
    func recipients(of target: MessageTarget, precedence: ConditionPrecedence) throws -> [String] {
        let reached: [String]
        switch target {
        case .token(let token): reached = registered.contains(token.rawValue) ? [token.rawValue] : []
        case .topic(let topic): reached = registered.filter { topics[$0, default: []].contains(topic.rawValue) }
        case .condition(let text):
            let condition = try Condition(parsing: text, precedence: precedence)
            reached = registered.filter { token in
                condition.isSatisfied(byTopics: Set(topics[token, default: []].map { TopicName(trusted: $0) }))
            }
        }
        return reached.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
    }
}

/// The version-2 recipient digest computed the way docs/event-format.md says, with the test's own SHA-256
/// helper: the device numbers (`devices`: each token's first registration's ordinal) ascending, in decimal.
private func expectedDigest(_ tokens: [String], devices: [String: Int]) -> String {
    sha256Hex(tokens.map { devices[$0]! }.sorted().map { "\($0)\n" }.joined())
}

private func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

@Suite("Replay and audit", .offThePool)
struct ReplayTests {
    @Test(
        "randomized: for every send, replay equals the test's own model, --naive agrees, and the record matches",
        arguments: [UInt64(7), 2026])
    func randomized(seed: UInt64) async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        var generator = SeededGenerator(seed: seed)
        let tokens = (0..<300).map { try! RegistrationToken("inst-\($0):APA91b\($0 &* 2_654_435_761 % 100_000)") }
        let topics = (0..<8).map { try! TopicName("t\($0)") }
        var model = Model()
        var expected: [UInt64: (recipients: [String], target: MessageTarget)] = [:]
        var sendSeqs: [UInt64: UInt64] = [:]
        let devices = Dictionary(uniqueKeysWithValues: tokens.enumerated().map { ($1.rawValue, $0 + 1) })
        // Everyone registers first (so a token's device number is its place in `tokens`); then thousands of random changes interleaved with sends.
        _ = try await ledger.append(
            WriteRequest(
                actor: "test", requestID: "register-all",
                operations: tokens.map { .register($0, platform: nil, appID: nil) }))
        for token in tokens { _ = model.apply(.register(token, platform: nil, appID: nil)) }
        for requestIndex in 0..<1500 {
            var operations: [LedgerOperation] = []
            for _ in 0..<Int.random(in: 1...4, using: &generator) {
                let token = tokens.randomElement(using: &generator)!
                let topic = topics.randomElement(using: &generator)!
                let roll = Int.random(in: 0..<100, using: &generator)
                switch roll {
                case 0..<45: operations.append(.subscribe(token, topic, via: .iid))
                case 45..<70: operations.append(.unsubscribe(token, topic, via: .v1))
                case 70..<76: operations.append(.unregister(token, reason: "test"))
                case 76..<82: operations.append(.register(token, platform: nil, appID: nil))
                default:
                    let precedence: ConditionPrecedence = Bool.random(using: &generator) ? .leftToRight : .standard
                    let target: MessageTarget
                    switch roll {
                    case 82..<86: target = .topic(topic)
                    case 86..<89: target = .token(token)
                    default:
                        let operands = Int.random(in: 1...5, using: &generator)
                        let condition = randomCondition(operands: operands, topics: topics, using: &generator)
                        target = .condition(condition.text(precedence: precedence))
                    }
                    operations.append(.send(target, precedence: precedence, messageJSON: Array("{}".utf8)))
                }
            }
            let receipt = try await ledger.append(
                WriteRequest(actor: "test", requestID: "r\(requestIndex)", operations: operations))
            for (operation, outcome) in zip(operations, receipt.outcomes) {
                // The expectation is taken before the model applies the send (sends change nothing) and
                // after every earlier operation of the same request.
                var expectation: [String]?
                if case .send(let target, let precedence, _, _) = operation {
                    expectation = try model.recipients(of: target, precedence: precedence)
                }
                let accepted = model.apply(operation)
                #expect(accepted == (outcome.rejection == nil), "\(operation) → \(outcome)")
                if case .sent(let seq, let messageID) = outcome, case .send(let target, _, _, _) = operation {
                    expected[messageID] = (expectation!, target)
                    sendSeqs[messageID] = seq
                }
            }
        }
        ledger.waitForAudiences()
        #expect(expected.count > 300)
        #expect(Set(expected.values.map { $0.target.kindName }) == ["topic", "token", "condition"])
        #expect(expected.values.contains { $0.recipients.count > 20 })
        try ledger.read { snapshot in
            for (messageID, expectation) in expected {
                let replay = try #require(try MessageReplay.replay(messageID, in: snapshot))
                #expect(replay.recipients.map(\.rawValue) == expectation.recipients, "message \(messageID)")
                #expect(hex(replay.recipientDigest) == expectedDigest(expectation.recipients, devices: devices))
                #expect(replay.devices.map { Int($0) } == expectation.recipients.map { devices[$0]! })
                #expect(replay.matchesRecord, "message \(messageID): \(String(describing: replay.recorded))")
                #expect(replay.recorded?.record.recipientCount == UInt64(expectation.recipients.count))
            }
            // Every instance's audited deliveries are exactly the messages whose recipients hold it, in order
            // (each instance evaluated alone against its own topics, the replay over everyone at once).
            for token in tokens {
                let audit = try #require(try snapshot.instanceAudit(token))
                let reached = expected.filter { $0.value.recipients.contains(token.rawValue) }
                    .map { (seq: sendSeqs[$0.key]!, id: $0.key) }.sorted { $0.seq < $1.seq }
                #expect(audit.deliveries.map(\.messageID) == reached.map(\.id), "\(token.rawValue)")
                #expect(audit.deliveries.map(\.seq) == reached.map(\.seq))
                #expect(audit.deliveries.allSatisfy { !$0.acknowledged } && audit.acknowledgedThrough == 0)
            }
            // The naive path folds the whole log for each message: check a sample.
            for messageID in expected.keys.sorted().prefix(40) {
                let naive = try #require(try MessageReplay.replay(messageID, in: snapshot, naive: true))
                #expect(naive.recipients.map(\.rawValue) == expected[messageID]!.recipients)
                #expect(naive.matchesRecord)
            }
        }
        let report = try ledger.verify(checkAudiences: true)
        #expect(report.isSound && report.audiencesChecked == expected.count && report.sendsWithoutAudience == 0)
    }

    @Test("time: between two events is the state after the earlier; a send's audience excludes what follows it")
    func timeSemantics() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        let a = try RegistrationToken("a-token"), b = try RegistrationToken("b-token")
        let c = try RegistrationToken("c-token"), d = try RegistrationToken("d-token")
        let x = try TopicName("X"), news = try TopicName("news")
        func at(_ text: String) -> LedgerTime { LedgerTime(parsing: text)! }
        func append(_ time: String, _ operations: LedgerOperation...) async throws -> WriteReceipt {
            try await ledger.append(WriteRequest(actor: "t", requestID: time, time: at(time), operations: operations))
        }
        _ = try await append(
            "2026-05-01T10:00:00Z", .register(a, platform: nil, appID: nil), .register(b, platform: nil, appID: nil),
            .register(c, platform: nil, appID: nil), .register(d, platform: nil, appID: nil))
        _ = try await append("2026-05-01T11:00:00Z", .subscribe(a, x, via: .iid), .subscribe(b, news, via: .iid))
        _ = try await append("2026-05-01T12:00:00Z", .unregister(d, reason: "gone"))
        // One request: a send, then a subscription at the very same time.
        let sendReceipt = try await append(
            "2026-05-01T13:00:00Z",
            .send(.condition("!('X' in topics)"), precedence: .leftToRight, messageJSON: Array("{}".utf8)),
            .subscribe(c, x, via: .iid),
            .send(.topic(news), precedence: .leftToRight, messageJSON: Array("{}".utf8)))
        ledger.waitForAudiences()
        guard case .sent(_, let notX) = sendReceipt.outcomes[0], case .sent(_, let toNews) = sendReceipt.outcomes[2]
        else {
            Issue.record("expected two sends")
            return
        }
        try ledger.read { snapshot in
            // !('X' in topics): registered instances not on X, including b (on another topic) and c (no topics
            // yet: its subscription came after the send); never d, unregistered before the send.
            let replay = try #require(try MessageReplay.replay(notX, in: snapshot))
            #expect(replay.recipients == [b, c])
            #expect(replay.matchesRecord)
            #expect(try MessageReplay.replay(toNews, in: snapshot)?.recipients == [b])
            // --at a time between two events: the state after the earlier one.
            let between = try snapshot.seq(atOrBefore: at("2026-05-01T11:30:00Z"))
            let audit = try #require(try snapshot.instanceAudit(a, at: between))
            #expect(audit.topicsAt == [x] && audit.registeredAt)
            let before = try #require(
                try snapshot.instanceAudit(a, at: snapshot.seq(atOrBefore: at("2026-05-01T10:30:00Z"))))
            #expect(before.topicsAt.isEmpty && before.registeredAt)
            // A time names every event stamped with it: at the send's time, c is already on X.
            let atSend = try snapshot.seq(atOrBefore: at("2026-05-01T13:00:00Z"))
            #expect(try snapshot.topicAudit(x, at: atSend, members: true)?.members == [a, c])
            let gone = try #require(try snapshot.instanceAudit(d))
            #expect(!gone.registeredAt && gone.registrations == [HeldInterval(start: 4, end: 7)])
            let topic = try #require(try snapshot.topicAudit(x, members: false))
            #expect(topic.history.map(\.seq) == [5, 9] && topic.history.map(\.count) == [1, 2])
        }
    }

    @Test("sends left without an audience (a crash, a ledger opened without recording) get one when a writer opens")
    func recovery() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        var ids: [UInt64] = []
        do {
            let ledger = try openTestLedger(directory) { $0.recordsAudiences = false }
            let token = try RegistrationToken("only-one")
            _ = try await ledger.append(
                WriteRequest(
                    actor: "t", requestID: "r",
                    operations: [
                        .register(token, platform: nil, appID: nil), .subscribe(token, TopicName("n"), via: .iid),
                    ]))
            for index in 0..<5 {
                let receipt = try await ledger.append(
                    WriteRequest(
                        actor: "t", requestID: "s\(index)",
                        operations: [.send(.topic(TopicName("n")), precedence: .standard, messageJSON: [])]))
                if case .sent(_, let id) = receipt.outcomes[0] { ids.append(id) }
            }
            #expect(try ledger.verify().sendsWithoutAudience == 5)
            ledger.close()
        }
        let reopened = try openTestLedger(directory)
        reopened.waitForAudiences()
        try reopened.read { snapshot in
            for id in ids {
                let replay = try #require(try MessageReplay.replay(id, in: snapshot))
                #expect(replay.matchesRecord && replay.recipientCount == 1)
            }
        }
        #expect(try reopened.verify(checkAudiences: true).sendsWithoutAudience == 0)
        #expect(try reopened.read { try $0.head().seq } == 12)
        reopened.close()
    }
}

@Suite("Tampering", .offThePool)
struct TamperingTests {
    /// A ledger with two instances on 'news', one send to it and its audience (seqs 1–6), closed.
    private static func build(_ directory: TemporaryDirectory) async throws -> UInt64 {
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        let one = try RegistrationToken("one"), two = try RegistrationToken("two")
        _ = try await ledger.append(
            WriteRequest(
                actor: "t", requestID: "r",
                operations: [
                    .register(one, platform: nil, appID: nil), .register(two, platform: nil, appID: nil),
                    .subscribe(one, TopicName("news"), via: .iid), .subscribe(two, TopicName("news"), via: .iid),
                ]))
        let receipt = try await ledger.append(
            WriteRequest(
                actor: "t", requestID: "s",
                operations: [.send(.topic(TopicName("news")), precedence: .standard, messageJSON: [])]))
        ledger.waitForAudiences()
        guard case .sent(5, let id) = receipt.outcomes[0] else { throw StoreError(.corrupt, "expected a send at 5") }
        return id
    }

    /// Rewrites the event at `seq` (its encoded bytes changed by `edit`, its stored hash kept, so the chain
    /// breaks there) behind the ledger's back.
    private static func tamper(_ directory: TemporaryDirectory, seq: UInt64, _ edit: (inout [UInt8]) -> Void) throws {
        let environment = try LMDBEnvironment(path: directory.path + "/demo-project")
        try environment.write { txn throws in
            let log = try txn.openDatabase("log")
            var record = try #require(try txn.value(in: log, forKey: seq))
            var event = Array(record[33...])
            edit(&event)
            record = Array(record[..<33]) + event
            try txn.put(log, key: seq, value: record)
        }
    }

    private static func replace(_ old: String, with new: String, in bytes: inout [UInt8]) {
        let needle = Array(old.utf8)
        guard let start = bytes.indices.first(where: { bytes[$0...].starts(with: needle) }) else {
            Issue.record("\(old) not in the event")
            return
        }
        bytes.replaceSubrange(start..<start + needle.count, with: Array(new.utf8))
    }

    @Test("a changed subscription event: replay --naive no longer matches the record, and verify fails")
    func changedSubscription() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let id = try await Self.build(directory)
        // Event 4 subscribed "two" to "news"; make it "nexs" (same length, still decodes).
        try Self.tamper(directory, seq: 4) { Self.replace("news", with: "nexs", in: &$0) }
        let ledger = try openTestLedger(directory, mode: .readOnly)
        try ledger.read { snapshot in
            let naive = try #require(try MessageReplay.replay(id, in: snapshot, naive: true))
            #expect(naive.recipients.map(\.rawValue) == ["one"])
            #expect(!naive.matchesRecord)
        }
        let report = try ledger.verify()
        #expect(!report.isSound)
        #expect(report.problems.contains { $0.contains("seq 4: hash mismatch") })
    }

    @Test("a changed audience event: replay reports the mismatch, and verify fails")
    func changedAudience() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let id = try await Self.build(directory)
        // Event 6 is the audience: sendSeq 5 (field 2: 0x10 0x05), recipientCount 2 → 1 (field 3: 0x18 0x02).
        try Self.tamper(directory, seq: 6) { bytes in
            let pattern: [UInt8] = [0x10, 0x05, 0x18, 0x02]
            guard let start = bytes.indices.first(where: { bytes[$0...].starts(with: pattern) }) else {
                Issue.record("no recipientCount field")
                return
            }
            bytes[start + 3] = 1
        }
        let ledger = try openTestLedger(directory, mode: .readOnly)
        try ledger.read { snapshot in
            let replay = try #require(try MessageReplay.replay(id, in: snapshot))
            #expect(replay.recorded?.record.recipientCount == 1 && replay.recipientCount == 2)
            #expect(!replay.matchesRecord)
        }
        #expect(!(try ledger.verify().isSound))
    }
}

@Suite("Store layout", .offThePool)
struct LayoutUpgradeTests {
    @Test("a layout-1 ledger (no sends index) is upgraded in place by the first writer; readers say what to do")
    func upgradeFromLayoutOne() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        var sendSeqs: [UInt64] = []
        do {
            let ledger = try openTestLedger(directory)
            let token = try RegistrationToken("upgrade-me")
            _ = try await ledger.append(
                WriteRequest(
                    actor: "t", requestID: "r",
                    operations: [
                        .register(token, platform: nil, appID: nil), .subscribe(token, TopicName("n"), via: .iid),
                    ]))
            for index in 0..<3 {
                let receipt = try await ledger.append(
                    WriteRequest(
                        actor: "t", requestID: "s\(index)",
                        operations: [.send(.topic(TopicName("n")), precedence: .standard, messageJSON: [])]))
                sendSeqs += receipt.outcomes.compactMap(\.seq)
            }
            ledger.close()
        }
        // Make it what layout 1 was: no `sends` index, version 1.
        try makeOlderLayout(1, in: directory) { txn in try txn.clear(try txn.openDatabase("sends")) }
        let upgraded = try openTestLedger(directory)
        defer { upgraded.close() }
        let inbox = try upgraded.read { snapshot in
            try snapshot.inbox(
                of: 1, after: 0, now: LedgerTime.now(), limit: 10, sends: SendCache(project: .default))
        }
        #expect(inbox.messages.map(\.cursor) == sendSeqs)
        #expect(try upgraded.verify().isSound)
    }
}
