import FCMWire
import Foundation
import LedgerCore
import LedgerQueries
import LedgerStore
import LMDBKit
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
        let (sendSeq, messageID) = try await send(ledger, live)
        return (tokens, sendSeq, messageID)
    }

    /// A topic's Live Activity update to `scores`, as the send route records it in a project that broadcasts
    /// (`broadcastIfChannel`); `recorded: false` as layout 12's builds recorded it (no `topicActivity`).
    func send(_ ledger: Ledger, _ message: [UInt8], broadcastIfChannel: Bool = true, recorded: Bool = true)
        async throws -> (UInt64, UInt64)
    {
        let activity = TopicActivitySend(.followers, broadcastIfChannel: broadcastIfChannel)
        let outcome = try await append(
            ledger,
            [.send(.topic(scores), precedence: .standard, messageJSON: message, topicActivity: recorded ? activity : nil)]
        )[0]
        guard case .sent(let sendSeq, let messageID) = outcome else { throw StoreError(.invalidArgument, "not sent") }
        ledger.waitForAudiences()
        return (sendSeq, messageID)
    }

    func sent(_ ledger: Ledger, at seq: UInt64) throws -> SentMessage {
        try ledger.read { try $0.sentEvent(at: seq).1 }
    }

    @Test("a send is a broadcast iff it asks to be and its topic has a channel when it is appended: recorded with it")
    func decidedAtTheSend() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        let device = try RegistrationToken("device-1")
        _ = try await append(
            ledger, [.register(device, platform: "ios", appID: nil), .subscribe(device, scores, via: .v1)])
        // Before the topic has a channel: to the followers, and it stays so once the topic has one.
        let (before, beforeID) = try await send(ledger, live)
        #expect(try sent(ledger, at: before).broadcastChannelID == nil)
        #expect(try sent(ledger, at: before).apnsDestination == .topicFollowers(topic: scores))
        _ = try await append(
            ledger,
            [
                .recordLiveActivityChannelCreated(
                    LiveActivityChannelChange(
                        topic: scores, channelID: "dGVzdA==", messageStoragePolicy: 0, apnsRequestID: "create-1"))
            ])
        #expect(try sent(ledger, at: before).apnsDestination == .topicFollowers(topic: scores))
        #expect(try ledger.read { try MessageReplay.replay(beforeID, in: $0) }?.broadcast == nil)
        // With the channel: recorded on it. Without asking (a project that does not broadcast): to the followers.
        let (on, _) = try await send(ledger, live)
        #expect(try sent(ledger, at: on).broadcastChannelID == "dGVzdA==")
        #expect(try sent(ledger, at: on).apnsDestination == .channel)
        let (plain, _) = try await send(ledger, live, broadcastIfChannel: false)
        #expect(try sent(ledger, at: plain).apnsDestination == .topicFollowers(topic: scores))
        // An end on the channel retires no follower's token; an end to the followers does.
        let follow = try APNsDeviceToken(bytes: Array(repeating: 0xA1, count: 32), sandbox: false)
        _ = try await append(ledger, [.followLiveActivity(device, scores, pushToken: follow)])
        let end = Array(
            #"{"apns":{"headers":{"apns-push-type":"liveactivity"},"payload":{"aps":{"event":"end","timestamp":1}}}}"#
                .utf8)
        let broadcastEnd = try await append(
            ledger,
            [
                .send(
                    .topic(scores), precedence: .standard, messageJSON: end,
                    topicActivity: TopicActivitySend(.followers, broadcastIfChannel: true)),
                .endLiveActivities(scores),
            ])
        #expect(broadcastEnd[1] == .unchanged)
        let followersEnd = try await append(
            ledger,
            [
                .send(
                    .topic(scores), precedence: .standard, messageJSON: end,
                    topicActivity: TopicActivitySend(.followers, broadcastIfChannel: false)),
                .endLiveActivities(scores),
            ])
        guard case .appended = followersEnd[1] else {
            Issue.record("the followers' end retired nothing: \(followersEnd)")
            return
        }
        // Deleted: the next send asks again and goes to the followers; the one recorded on it keeps its channel.
        _ = try await append(
            ledger,
            [
                .recordLiveActivityChannelDeleted(
                    LiveActivityChannelChange(
                        topic: scores, channelID: "dGVzdA==", apnsRequestID: "delete-1", reason: "deleted"))
            ])
        let (after, _) = try await send(ledger, live)
        #expect(try sent(ledger, at: after).broadcastChannelID == nil)
        #expect(try sent(ledger, at: on).broadcastChannelID == "dGVzdA==")
        // A start is never a broadcast, whatever was recorded.
        let start = Array(
            #"{"apns":{"headers":{"apns-push-type":"liveactivity"},"payload":{"aps":{"event":"start","timestamp":1,"attributes-type":"MatchAttributes","attributes":{},"content-state":{},"alert":{"title":"x"}}}}}"#
                .utf8)
        #expect(
            APNsDestination(
                message: DevicePayload.object(ofMessageJSON: start), target: .topic(scores),
                broadcastChannel: "dGVzdA==") == .pushToStart(attributesType: "MatchAttributes"))
        let started = try await append(
            ledger,
            [
                .send(
                    .topic(scores), precedence: .standard, messageJSON: start,
                    topicActivity: TopicActivitySend(.pushToStart(attributesType: "MatchAttributes")))
            ])
        let startSeq = try #require(started[0].seq)
        // Where each went outlives its content: forgotten by retention, the sends still read as they went out (not
        // as pushes to every member's own APNs token).
        ledger.waitForAudiences()
        let cutoff = LedgerTime(microseconds: LedgerTime.now().microseconds + 60_000_000)
        let forgotten = try await append(ledger, [.forgetContents(before: cutoff, limit: 100)])
        #expect(forgotten[0].seq != nil)
        #expect(try sent(ledger, at: before).messageJSON.isEmpty)
        #expect(try sent(ledger, at: before).apnsDestination == .topicFollowers(topic: scores))
        #expect(try sent(ledger, at: on).apnsDestination == .channel)
        #expect(try sent(ledger, at: startSeq).apnsDestination == .pushToStart(attributesType: "MatchAttributes"))
        #expect(try ledger.verify().isSound)
    }

    @Test("ledger import records where a topic's Live Activity send goes, never as a broadcast")
    func imported() throws {
        func operation(_ text: String) throws -> LedgerOperation? {
            let bytes = Array(text.utf8)
            return try bytes.withUnsafeBufferPointer { try OperationImport.parse(line: $0, number: 1) }?.operation
        }
        let update = try operation(
            #"{"op":"send","topic":"scores","message":{"apns":{"headers":{"apns-push-type":"liveactivity"},"payload":{"aps":{"event":"update","timestamp":1,"content-state":{}}}}}}"#
        )
        guard case .send(_, _, _, let activity)? = update else {
            Issue.record("not a send: \(String(describing: update))")
            return
        }
        #expect(activity == TopicActivitySend(.followers, broadcastIfChannel: false))
        let plain = try operation(#"{"op":"send","topic":"scores","message":{"notification":{"title":"x"}}}"#)
        guard case .send(_, _, _, let none)? = plain else {
            Issue.record("not a send")
            return
        }
        #expect(none == nil)
    }

    @Test("a ledger of layout 12 upgrades in place: liveActivityTokens is made, its sends read as the broadcasts they were")
    func upgradeFromLayout12() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        var sendSeq: UInt64 = 0
        do {
            let ledger = try openTestLedger(directory)
            let device = try RegistrationToken("device-1")
            _ = try await append(
                ledger, [.register(device, platform: "ios", appID: nil), .subscribe(device, scores, via: .v1)])
            _ = try await append(
                ledger,
                [
                    .recordLiveActivityChannelCreated(
                        LiveActivityChannelChange(
                            topic: scores, channelID: "dGVzdA==", messageStoragePolicy: 0, apnsRequestID: "c"))
                ])
            // Layout 12's builds recorded neither a channel nor where the send goes.
            (sendSeq, _) = try await send(ledger, live, recorded: false)
            ledger.close()
        }
        // What layout 12's builds left: no `liveActivityTokens`. A reader refuses it until a writer upgrades it.
        try LMDBEnvironment(path: directory.path + "/" + ProjectID.default.rawValue).write { txn in
            try txn.drop(try txn.openDatabase("liveActivityTokens"))
            try txn.put(try txn.openDatabase("meta"), key: "layoutVersion", value: UInt32(12))
        }
        #expect {
            try openTestLedger(directory, mode: .readOnly)
        } throws: { error in
            "\(error)".contains("older store layout")
        }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        // Layout 12 accepted a topic's Live Activity send only as a broadcast: it reads as one (its channel, the
        // topic's from before it, is the pusher's to find), pending until its outcome is recorded.
        #expect(try sent(ledger, at: sendSeq).apnsDestination == .channel)
        #expect(try ledger.read { try $0.broadcast(ofSendAt: sendSeq, sent: $0.sentEvent(at: sendSeq).1) }?.state == .pending)
        let device = try RegistrationToken("device-1")
        let follow = try APNsDeviceToken(bytes: Array(repeating: 0xB2, count: 32), sandbox: false)
        guard case .appended = try await append(ledger, [.followLiveActivity(device, scores, pushToken: follow)])[0]
        else {
            Issue.record("the upgraded ledger could not record a follow")
            return
        }
        let (on, _) = try await send(ledger, live)
        #expect(try sent(ledger, at: on).broadcastChannelID == "dGVzdA==")
        #expect(try ledger.verify().isSound)
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
