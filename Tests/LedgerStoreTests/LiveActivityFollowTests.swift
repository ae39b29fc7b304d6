import Foundation
import LedgerCore
import LedgerQueries
import LedgerStore
import LedgerTestSupport
import Testing

/// Issue #66 item 2 in the ledger: the events a device's Live Activity follows and push-to-start tokens append,
/// the fold over them, the projection (per topic, per device, at a seq), and their erasure.
@Suite("Live Activity followers in the ledger: events, the fold, the projection, erasure", .offThePool)
struct LiveActivityFollowTests {
    let scores = try! TopicName("scores")
    let phone = try! RegistrationToken("cPHONEPHONEPHONEPHONE0:APA91b-live-activity-phone-0123456789")
    let tablet = try! RegistrationToken("dTABLETTABLETTABLETTA0:APA91b-live-activity-tablet-0123456789")
    let android = try! RegistrationToken("eANDROIDANDROIDANDRO0:APA91b-live-activity-android-0123456789")

    /// A token of `count` bytes, each `first` plus its index (distinct tokens for distinct `first`s).
    func activityToken(_ first: UInt8, count: Int = 32) -> APNsDeviceToken {
        try! APNsDeviceToken(bytes: (0..<count).map { first &+ UInt8($0) }, sandbox: false)
    }

    func append(_ ledger: Ledger, _ operations: [LedgerOperation], actor: String = "device") async throws
        -> [OperationOutcome]
    {
        try await ledger.append(WriteRequest(actor: actor, requestID: UUID().uuidString, operations: operations))
            .outcomes
    }

    func registerDevices(_ ledger: Ledger) async throws {
        _ = try await append(
            ledger,
            [
                .register(phone, platform: "ios", appID: "app"), .register(tablet, platform: "ios", appID: "app"),
                .register(android, platform: "android", appID: "app"),
            ])
        _ = try await append(
            ledger, [.setAPNsToken(phone, activityToken(0x10)), .setAPNsToken(tablet, activityToken(0x20))])
    }

    @Test("follow, replace, unfollow, push-to-start and end are events; the projection, the fold and a rebuild agree")
    func lifecycle() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        try await registerDevices(ledger)
        let first = activityToken(0x40)
        let second = activityToken(0x60, count: 16)
        guard
            case .appended(let followedAt)? = try await append(
                ledger, [.followLiveActivity(phone, scores, pushToken: first)]
            ).first
        else { Issue.record("the follow was not appended"); return }
        // The same token again changes nothing and appends nothing.
        #expect(try await append(ledger, [.followLiveActivity(phone, scores, pushToken: first)]) == [.unchanged])
        _ = try await append(ledger, [.followLiveActivity(tablet, scores, pushToken: activityToken(0x80))])
        guard
            case .appended(let replacedAt)? = try await append(
                ledger, [.followLiveActivity(phone, scores, pushToken: second)]
            ).first
        else { Issue.record("the replacement was not appended"); return }
        // Refused: not ios, not registered; a DELETE of a follow that does not exist changes nothing.
        #expect(
            try await append(ledger, [.followLiveActivity(android, scores, pushToken: first)]).first?.rejection?.code
                == .wrongPlatform)
        let stranger = try RegistrationToken("cSTRANGERSTRANGERSTRA0:APA91b-never-registered")
        #expect(
            try await append(ledger, [.followLiveActivity(stranger, scores, pushToken: first)]).first?.rejection?.code
                == .notFound)
        #expect(
            try await append(ledger, [.unfollowLiveActivity(android, scores, reason: "deleted by the device")])
                == [.unchanged])
        // APNs' refusal of a token ends only the follow with that token: the phone follows with `second` now.
        #expect(
            try await append(
                ledger, [.unfollowLiveActivity(phone, scores, reason: "APNs: Unregistered", ifPushToken: first)])
                == [.unchanged])
        let start = activityToken(0xA0)
        _ = try await append(ledger, [.setPushToStartToken(phone, attributesType: "MatchAttributes", pushToken: start)])

        let (phoneID, tabletID, topicID) = try ledger.read { snapshot throws in
            (
                try #require(try snapshot.instanceID(of: phone)), try #require(try snapshot.instanceID(of: tablet)),
                try #require(try snapshot.topicID(of: scores))
            )
        }
        try ledger.read { snapshot throws in
            #expect(try snapshot.liveActivityFollowers(of: topicID) == [phoneID, tabletID])
            #expect(try snapshot.liveActivityToken(of: phoneID, scope: .topic(topicID)) == second)
            // At a seq: what a send at that seq is pushed to.
            #expect(try snapshot.liveActivityToken(of: phoneID, scope: .topic(topicID), at: followedAt) == first)
            #expect(try snapshot.liveActivityToken(of: phoneID, scope: .topic(topicID), at: replacedAt - 1) == first)
            #expect(try snapshot.liveActivityToken(of: phoneID, scope: .topic(topicID), at: replacedAt) == second)
            #expect(try snapshot.liveActivityToken(of: phoneID, scope: .topic(topicID), at: followedAt - 1) == nil)
            #expect(
                try snapshot.liveActivityToken(of: phoneID, scope: .pushToStart(attributesType: "MatchAttributes"))
                    == start)
            let held = try snapshot.liveActivityTokens(of: phoneID).sorted { $0.interval.start < $1.interval.start }
            #expect(held.map(\.token) == [first, second, start])
            #expect(held.map(\.interval.end) == [replacedAt, nil, nil])
        }

        // A topic send that ends the activity retires every follower's token, in the send's request.
        let end = Array(#"{"apns":{"payload":{"aps":{"event":"end","timestamp":1}}}}"#.utf8)
        let outcomes = try await append(
            ledger, [.send(.topic(scores), precedence: .leftToRight, messageJSON: end), .endLiveActivities(scores)],
            actor: "admin")
        guard case .sent(let sendSeq, let messageID)? = outcomes.first, case .appended(let endedAt)? = outcomes.last
        else { Issue.record("\(outcomes)"); return }
        #expect(endedAt == sendSeq + 1)
        let ended = try #require(try ledger.readLog { try $0.event(at: endedAt) })
        #expect(ended.body == .liveActivitiesEnded(topic: scores, sendSeq: sendSeq, messageID: messageID))
        try ledger.read { snapshot throws in
            #expect(try snapshot.liveActivityFollowers(of: topicID) == [])
            // The send's own pushes still find the tokens held at the send.
            #expect(
                try snapshot.liveActivityToken(of: tabletID, scope: .topic(topicID), at: sendSeq) == activityToken(0x80)
            )
            #expect(try snapshot.liveActivityToken(of: tabletID, scope: .topic(topicID), at: endedAt) == nil)
        }
        // Nobody follows now: a second end appends nothing; an end without its send is refused.
        let again = try await append(
            ledger, [.send(.topic(scores), precedence: .leftToRight, messageJSON: end), .endLiveActivities(scores)],
            actor: "admin")
        #expect(again.last == .unchanged)
        #expect(
            try await append(ledger, [.endLiveActivities(scores)], actor: "admin").first?.rejection?.code == .notFound)

        // Follow again, then unfollow: an event; the unregistration retires the push-to-start token.
        _ = try await append(ledger, [.followLiveActivity(tablet, scores, pushToken: activityToken(0x90))])
        #expect(
            try await append(ledger, [.unfollowLiveActivity(tablet, scores, reason: "deleted by the device")]).first?
                .seq != nil)
        _ = try await append(ledger, [.unregister(phone, reason: "deleted by the device")])
        try ledger.read { snapshot throws in
            #expect(try snapshot.liveActivityFollowers(of: topicID) == [])
            #expect(
                try snapshot.liveActivityToken(of: phoneID, scope: .pushToStart(attributesType: "MatchAttributes"))
                    == nil)
        }

        // The in-memory fold holds what the projection holds: nothing now.
        let folded = try #require(try foldLog(ledger).last)
        #expect(folded.liveActivityTokens.isEmpty)
        let beforeEnd = try #require(try foldLog(ledger, through: sendSeq).last)
        #expect(beforeEnd.liveActivityToken(of: phone, topic: scores) == second)
        #expect(beforeEnd.liveActivityToken(of: tablet, topic: scores) == activityToken(0x80))

        // Sealed like an APNs token: the record holds the value beside its key.
        try ledger.readLog { snapshot throws in
            let event = try #require(try snapshot.event(at: followedAt))
            #expect(event.body.sealedValues == [.token(phone), .apnsToken(first)])
            #expect(event.seals?.count == 2)
        }
        #expect(try ledger.verify().problems == [])
        let histories = try ledger.read { try $0.liveActivityTokens(of: phoneID) }
        _ = try ledger.rebuildProjections()
        #expect(try ledger.verify().problems == [])
        #expect(try ledger.read { try $0.liveActivityTokens(of: phoneID) } == histories)
        ledger.close()
    }

    @Test("an erasure forgets the device's activity and push-to-start tokens: no form of them is left in any file")
    func erasure() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        try await registerDevices(ledger)
        let followed = activityToken(0x41)
        let replaced = activityToken(0x61, count: 48)
        let start = activityToken(0xA1, count: 64)
        let kept = activityToken(0xC1)
        _ = try await append(ledger, [.followLiveActivity(phone, scores, pushToken: followed)])
        _ = try await append(ledger, [.followLiveActivity(phone, scores, pushToken: replaced)])
        _ = try await append(ledger, [.setPushToStartToken(phone, attributesType: "MatchAttributes", pushToken: start)])
        _ = try await append(ledger, [.followLiveActivity(tablet, scores, pushToken: kept)])
        for token in [followed, replaced, start, kept] {
            #expect(!IdentifierSearch.files(under: directory.path, holding: token.bytes).isEmpty)
        }

        let receipt = try await append(ledger, [.erase(phone, reason: "GDPR Art. 17")], actor: "admin")
        #expect(receipt.first?.seq != nil)
        for token in [followed, replaced, start] {
            #expect(IdentifierSearch.files(under: directory.path, holding: token.bytes) == [])
        }
        // The other device's follow is untouched, and still pushed to.
        #expect(!IdentifierSearch.files(under: directory.path, holding: kept.bytes).isEmpty)
        let (tabletID, topicID) = try ledger.read { snapshot throws in
            (try #require(try snapshot.instanceID(of: tablet)), try #require(try snapshot.topicID(of: scores)))
        }
        #expect(try ledger.read { try $0.liveActivityFollowers(of: topicID) } == [tabletID])
        // registered, apnsTokenSet, two follows, the push-to-start token.
        let head = try ledger.read { try $0.head().seq }
        let event = try #require(try ledger.readLog { try $0.event(at: head) })
        guard case .erased(let erasure) = event.body else {
            Issue.record("the last event is \(event.kind), not erased")
            return
        }
        #expect(erasure.redactedEvents == 5)
        #expect(try ledger.verify().problems == [])
        _ = try ledger.rebuildProjections()
        #expect(try ledger.verify().problems == [])
        ledger.close()
    }
}
