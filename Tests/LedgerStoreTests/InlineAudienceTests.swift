import Foundation
import LMDBKit
import LedgerCore
import LedgerQueries
import LedgerTestSupport
import Synchronization
import Testing

@testable import LedgerStore

@Suite("Audiences recorded with their sends", .offThePool)
struct InlineAudienceTests {
    static func token(_ index: Int) -> RegistrationToken { try! RegistrationToken("inline-\(index):APA91b") }

    static func subscribe(_ index: Int, _ topic: String) -> LedgerOperation {
        .subscribe(token(index), try! TopicName(topic), via: .v1)
    }

    static func send(_ topic: String) -> LedgerOperation {
        .send(.topic(try! TopicName(topic)), precedence: .leftToRight, messageJSON: [])
    }

    static func audience(at seq: UInt64, in ledger: Ledger) throws -> AudienceRecord? {
        try ledger.read { snapshot in
            guard case .audience(let record)? = try snapshot.event(at: seq)?.body else { return nil }
            return record
        }
    }

    @Test(
        "a small topic's or a device's audience is appended in its send's transaction, as of the send; others after it")
    func smallInlineLargeAfter() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory) { $0.inlineAudienceLimit = 3 }
        defer { ledger.close() }
        var setUp: [LedgerOperation] = (0..<4).map { .register(Self.token($0), platform: nil, appID: nil) }
        setUp += (0..<3).map { Self.subscribe($0, "small") }
        setUp += (0..<4).map { Self.subscribe($0, "large") }
        _ = try await ledger.append(WriteRequest(actor: "t", requestID: "setup", operations: setUp))
        let head = try ledger.read { try $0.head().seq }

        // A subscription after the send, in the same request, is not in the send's audience.
        let small = try await ledger.append(
            WriteRequest(actor: "t", requestID: "small", operations: [Self.send("small"), Self.subscribe(3, "small")]))
        guard case .sent(let sendSeq, let messageID) = small.outcomes[0] else {
            Issue.record("not sent: \(small)")
            return
        }
        #expect(sendSeq == head + 1)
        #expect(small.recordedAudiences == [messageID: head + 3])
        let record = try #require(try Self.audience(at: head + 3, in: ledger))
        #expect(record.messageID == messageID && record.sendSeq == sendSeq && record.recipientCount == 3)
        #expect(ledger.acknowledgedSeq == head + 3)

        // Four recipients, over the limit: the recorder appends the audience after the send's transaction.
        let large = try await ledger.append(
            WriteRequest(actor: "t", requestID: "large", operations: [Self.send("large")]))
        guard case .sent(let largeSeq, let largeID) = large.outcomes[0] else {
            Issue.record("not sent: \(large)")
            return
        }
        #expect(large.recordedAudiences.isEmpty)
        ledger.waitForAudiences()
        let later = try #require(try Self.audience(at: largeSeq + 1, in: ledger))
        #expect(later.messageID == largeID && later.recipientCount == 4)

        // A device: inline. A condition (it may read every registered device) and a topic of more than twice the
        // limit now (its members are not even read): the recorder's.
        let others = try await ledger.append(
            WriteRequest(
                actor: "t", requestID: "others",
                operations: [
                    .send(.token(Self.token(0)), precedence: .leftToRight, messageJSON: []),
                    .send(.condition("'small' in topics"), precedence: .leftToRight, messageJSON: []),
                    .register(Self.token(4), platform: nil, appID: nil),
                    .register(Self.token(5), platform: nil, appID: nil),
                    .register(Self.token(6), platform: nil, appID: nil),
                    Self.subscribe(4, "large"), Self.subscribe(5, "large"), Self.subscribe(6, "large"),
                    Self.send("large"),
                ]))
        let sent = others.outcomes.compactMap { outcome -> UInt64? in
            guard case .sent(_, let messageID) = outcome else { return nil }
            return messageID
        }
        #expect(sent.count == 3)
        #expect(Set(others.recordedAudiences.keys) == [sent[0]])
        ledger.waitForAudiences()
        #expect(try ledger.read { try $0.sendsWithoutAudience() }.isEmpty)
        let report = try ledger.verify(checkAudiences: true)
        #expect(report.isSound, "\(report.problems)")
    }

    @Test("when the audience cannot be appended with its send, the send still commits and the recorder records it")
    func failedInlineFallsBackToTheRecorder() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        // Once armed, the first LMDB call of the second write transaction after the last one seen fails: the
        // send's batch is the first, the child transaction that appends its audience the second.
        let injected = Mutex<(seen: Int, armedAt: Int?, fired: Int)>((0, nil, 0))
        let ledger = try openTestLedger(directory) {
            $0.environment.faultInjector = LMDBFaultInjector { transaction, call in
                injected.withLock { state in
                    state.seen = max(state.seen, transaction)
                    guard let at = state.armedAt, transaction == at + 2, call == 1 else { return nil }
                    state.fired += 1
                    return .ioError
                }
            }
        }
        defer { ledger.close() }
        _ = try await ledger.append(
            WriteRequest(
                actor: "t", requestID: "setup",
                operations: [.register(Self.token(0), platform: nil, appID: nil), Self.subscribe(0, "news")]))
        injected.withLock { $0.armedAt = $0.seen }
        let sent = try await ledger.append(WriteRequest(actor: "t", requestID: "send", operations: [Self.send("news")]))
        #expect(injected.withLock { $0.fired } == 1)
        guard case .sent(let seq, let messageID) = sent.outcomes[0] else {
            Issue.record("not sent: \(sent)")
            return
        }
        #expect(sent.recordedAudiences.isEmpty)
        ledger.waitForAudiences()
        let record = try #require(try Self.audience(at: seq + 1, in: ledger))
        #expect(record.messageID == messageID && record.recipientCount == 1)
        let report = try ledger.verify(checkAudiences: true)
        #expect(report.isSound, "\(report.problems)")
    }

    @Test(
        "each send of a batch gets its own audience, in one transaction, whatever the isolation",
        arguments: [
            Ledger.RequestIsolation.retryAlone, .nestedPerRequest,
        ])
    func batchOfSends(isolation: Ledger.RequestIsolation) async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory) { $0.isolation = isolation }
        defer { ledger.close() }
        var setUp: [LedgerOperation] = (0..<3).map { .register(Self.token($0), platform: nil, appID: nil) }
        setUp += [Self.subscribe(0, "a"), Self.subscribe(1, "a"), Self.subscribe(2, "b")]
        _ = try await ledger.append(WriteRequest(actor: "t", requestID: "setup", operations: setUp))
        // Requests submitted together share a group commit (or several, when the writer is quick).
        let receipts = try await withThrowingTaskGroup(of: WriteReceipt.self) { group in
            for index in 0..<8 {
                group.addTask {
                    try await ledger.append(
                        WriteRequest(
                            actor: "t", requestID: "send-\(index)",
                            operations: [Self.send(index.isMultiple(of: 2) ? "a" : "b"), Self.send("a")]))
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        for receipt in receipts {
            let sent = receipt.outcomes.compactMap { outcome -> UInt64? in
                guard case .sent(_, let messageID) = outcome else { return nil }
                return messageID
            }
            #expect(Set(receipt.recordedAudiences.keys) == Set(sent) && sent.count == 2)
            for (messageID, seq) in receipt.recordedAudiences {
                #expect(try Self.audience(at: seq, in: ledger)?.messageID == messageID)
            }
        }
        #expect(try ledger.read { try $0.sendsWithoutAudience() }.isEmpty)
        let report = try ledger.verify(checkAudiences: true)
        #expect(report.isSound, "\(report.problems)")
    }
}
