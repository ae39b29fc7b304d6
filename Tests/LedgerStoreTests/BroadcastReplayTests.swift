import Foundation
import LedgerCore
import LedgerQueries
import LedgerStore
import LedgerTestSupport
import Testing

/// What the ledger says of a topic's Live Activity send carried by the topic's broadcast channel: the recorded
/// broadcast (channel, Apple's answer, `apns-request-id`, when) beside the replayed audience, every recipient
/// addressed and none pushed one by one.
@Suite("A broadcast in the replay: recorded in pushProgress, the audience addressed", .offThePool)
struct BroadcastReplayTests {
    let scores = try! TopicName("scores")
    let live = Array(
        #"{"apns":{"headers":{"apns-push-type":"liveactivity"},"payload":{"aps":{"content-state":{},"event":"update","timestamp":1}}}}"#
            .utf8)

    func append(_ ledger: Ledger, _ operations: [LedgerOperation]) async throws -> [OperationOutcome] {
        try await ledger.append(WriteRequest(actor: "admin", requestID: UUID().uuidString, operations: operations))
            .outcomes
    }

    /// `devices` iOS devices subscribed to `scores`, the topic's channel, and one `liveactivity` send to it, its
    /// audience recorded: the devices' tokens, the send's seq and its message id.
    func broadcastSend(_ ledger: Ledger, devices: Int) async throws -> ([RegistrationToken], UInt64, UInt64) {
        let tokens = try (1...devices).map { try RegistrationToken("device-\($0)") }
        _ = try await append(
            ledger,
            tokens.flatMap { [.register($0, platform: "ios", appID: nil), .subscribe($0, scores, via: .v1)] })
        _ = try await append(
            ledger,
            [
                .recordLiveActivityChannelCreated(
                    LiveActivityChannelChange(
                        topic: scores, channelID: "dGVzdA==", messageStoragePolicy: 0, apnsRequestID: "create-1"))
            ])
        let outcome = try await append(ledger, [.send(.topic(scores), precedence: .standard, messageJSON: live)])[0]
        guard case .sent(let sendSeq, let messageID) = outcome else { throw StoreError(.invalidArgument, "not sent") }
        ledger.waitForAudiences()
        return (tokens, sendSeq, messageID)
    }

    @Test("pending until recorded, then accepted with Apple's request id; the replay and its JSON say so")
    func recordedAndReplayed() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        let (tokens, sendSeq, messageID) = try await broadcastSend(ledger, devices: 3)
        let pending = try #require(try ledger.read { try MessageReplay.replay(messageID, in: $0) })
        #expect(pending.broadcast?.state == .pending)
        #expect(pending.broadcast?.summary == "broadcast pending")
        // Pending is not addressed: the JSON and the per-recipient note say pending.
        #expect(
            AuditJSON.replay(pending, project: .default, recipients: pending.recipients[...]).broadcast?.recipients
                == "pending")
        #expect(pending.broadcast?.recipientNote == "broadcast pending")
        _ = try await append(
            ledger,
            [
                .recordPushProgress(
                    PushProgress(
                        sendSeq: sendSeq, throughToken: nil, finished: true, settledThrough: sendSeq,
                        broadcast: BroadcastOutcome(channelID: "dGVzdA==", status: 200, apnsRequestID: "req-9")))
            ])
        let replay = try #require(try ledger.read { try MessageReplay.replay(messageID, in: $0) })
        let broadcast = try #require(replay.broadcast)
        #expect(broadcast.state == .accepted && broadcast.channelID == "dGVzdA==" && broadcast.apnsRequestID == "req-9")
        #expect(broadcast.time != nil && broadcast.seq == sendSeq + 2)
        #expect(broadcast.summary.hasPrefix(#"broadcast to channel "dGVzdA==" at "#), "\(broadcast.summary)")
        #expect(broadcast.summary.hasSuffix(": accepted (apns-request-id req-9)"), "\(broadcast.summary)")
        // The audience is the topic's members at the send, matching the record; nobody has a push of their own.
        #expect(replay.recipients == tokens.sorted() && replay.matchesRecord)
        #expect(replay.pushes.allSatisfy { $0 == nil })
        let json = AuditJSON.replay(replay, project: .default, recipients: replay.recipients[...])
        #expect(json.broadcast?.state == "accepted" && json.broadcast?.recipients == "addressed")
        #expect(json.pushes.isEmpty && json.pushCounts == nil)
        // An ordinary send to the topic has no broadcast.
        guard
            case .sent(_, let plainID) = try await append(
                ledger, [.send(.topic(scores), precedence: .standard, messageJSON: Array(#"{"data":{"k":"v"}}"#.utf8))])[
                    0]
        else {
            Issue.record("not sent")
            return
        }
        ledger.waitForAudiences()
        #expect(try ledger.read { try MessageReplay.replay(plainID, in: $0) }?.broadcast == nil)
        #expect(try ledger.verify().isSound)
    }

    @Test("a broadcast Apple refused addressed nobody: the replay's JSON says notAddressed, never addressed")
    func rejectedIsNotAddressed() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        let (_, sendSeq, messageID) = try await broadcastSend(ledger, devices: 2)
        _ = try await append(
            ledger,
            [
                .recordPushProgress(
                    PushProgress(
                        sendSeq: sendSeq, throughToken: nil, finished: true, settledThrough: sendSeq,
                        broadcast: BroadcastOutcome(
                            channelID: "dGVzdA==", status: 400, reason: "BadExpirationDate", apnsRequestID: "req-1")))
            ])
        let replay = try #require(try ledger.read { try MessageReplay.replay(messageID, in: $0) })
        let broadcast = try #require(replay.broadcast)
        #expect(broadcast.state == .rejected)
        #expect(broadcast.recipients == "notAddressed")
        #expect(broadcast.recipientNote == "not addressed: broadcast rejected")
        let json = AuditJSON.replay(replay, project: .default, recipients: replay.recipients[...])
        #expect(json.broadcast?.recipients == "notAddressed")
        let encoded = String(decoding: try JSONEncoder().encode(json), as: UTF8.self)
        #expect(encoded.contains(#""recipients":"notAddressed""#), "\(encoded)")
        #expect(!encoded.contains(#""addressed""#), "\(encoded)")
        // Expired and never made: not addressed either.
        #expect(RecordedBroadcast(state: .expired, channelID: "").recipients == "notAddressed")
        #expect(RecordedBroadcast(state: .rejected, channelID: "").recipientNote == "not addressed: broadcast not made")
        #expect(RecordedBroadcast(state: .accepted, channelID: "x", status: 200).recipients == "addressed")
    }

    @Test("a refusal and a broadcast never made read as rejected, with Apple's status and reason, or why")
    func refused() {
        var refused = RecordedBroadcast(state: .rejected, channelID: "dGVzdA==")
        refused.status = 404
        refused.reason = "ChannelNotRegistered"
        refused.time = LedgerTime(microseconds: 0)
        #expect(refused.summary.hasSuffix(": rejected 404 ChannelNotRegistered"), "\(refused.summary)")
        refused.reason = "Bad \"reason\""
        #expect(refused.summary.hasSuffix(#": rejected 404 "Bad \"reason\"""#), "quoted: \(refused.summary)")
        let never = RecordedBroadcast(state: .expired, channelID: "")
        #expect(never.summary == "broadcast: expired")
    }
}
