import FCMWire
import LedgerCore
import LedgerTestSupport
import Testing

/// A message object as the send route reads it.
private func object(_ json: String) throws -> [String: JSONValue] {
    try #require(try JSONValue(parsing: Array(json.utf8)).object)
}

private let activity = String(repeating: "ab", count: 40)
private let registration = "cXyZ-123:APA91bH_q.x"

/// A token send carrying `live_activity_token`, with `apns` members beside it (`aps` given as JSON text).
private func liveMessage(aps: String, headers: String? = nil, extra: String = "") -> String {
    let headerMember = headers.map { #","headers":\#($0)"# } ?? ""
    return
        #"{"token":"\#(registration)"\#(extra),"apns":{"live_activity_token":"\#(activity)"\#(headerMember),"payload":{"aps":\#(aps)}}}"#
}

private let update = #"{"timestamp":1764201600,"event":"update","content-state":{"score":"1-0"}}"#
private let start =
    #"{"timestamp":1764201600,"event":"start","content-state":{"score":"0-0"},"attributes-type":"MatchAttributes","attributes":{"home":"A"},"alert":{"title":"Kick-off","body":"A v B"}}"#

@Suite(
    "Live Activity messages: FCM's apns.live_activity_token, checked as Apple documents ActivityKit pushes", .offThePool
)
struct LiveActivityMessageTests {
    let project = try! ProjectID("shop-prod")

    func validate(_ json: String) throws -> ValidatedMessage {
        try MessageValidation.validate(try object(json), precedence: .standard)
    }

    /// The field a message is refused for (`nil`: accepted).
    func refusedField(_ json: String) throws -> String? {
        do {
            _ = try validate(json)
            return nil
        } catch let error as LedgerCoreError {
            #expect(error.code == .invalidArgument)
            return error.field
        }
    }

    @Test(
        "start, update and end are accepted, with the token in snake_case or lowerCamelCase",
        arguments: [
            liveMessage(aps: start), liveMessage(aps: update),
            liveMessage(aps: #"{"timestamp":1764201600,"event":"end"}"#),
            liveMessage(
                aps:
                    #"{"timestamp":1764201600,"event":"end","content-state":{"score":"2-1"},"dismissal-date":1764205200,"stale-date":0,"relevance-score":0.5}"#,
                headers: #"{"apns-priority":"5","apns-push-type":"liveactivity"}"#),
            liveMessage(aps: update, headers: #"{"APNS-Priority":"10"}"#),
            // The alert of a start may come from the message's notification (it becomes aps.alert).
            liveMessage(
                aps:
                    #"{"timestamp":1,"event":"start","content-state":{},"attributes-type":"T","attributes":{}}"#,
                extra: #","notification":{"title":"Kick-off"}"#),
            #"{"token":"\#(registration)","apns":{"liveActivityToken":"\#(activity.uppercased())","payload":{"aps":\#(update)}}}"#,
            // A topic's: a broadcast on the topic's channel (whether it has one is the send route's to check).
            #"{"topic":"scores","apns":{"headers":{"apns-push-type":"liveactivity","apns-priority":"5"},"payload":{"aps":\#(update)}}}"#,
        ])
    func accepted(json: String) throws {
        #expect(try refusedField(json) == nil)
    }

    @Test(
        "each rule refuses naming its field",
        arguments: [
            // The token: a token send's, hex of an APNs token's length.
            (
                #"{"topic":"scores","apns":{"live_activity_token":"\#(activity)","payload":{"aps":\#(update)}}}"#,
                "message.apns.live_activity_token"
            ),
            (
                #"{"condition":"'a' in topics","apns":{"live_activity_token":"\#(activity)","payload":{"aps":\#(update)}}}"#,
                "message.apns.live_activity_token"
            ),
            (
                #"{"token":"\#(registration)","apns":{"live_activity_token":"not hex","payload":{"aps":\#(update)}}}"#,
                "message.apns.live_activity_token"
            ),
            (
                #"{"token":"\#(registration)","apns":{"live_activity_token":"abc","payload":{"aps":\#(update)}}}"#,
                "message.apns.live_activity_token"
            ),
            (
                #"{"token":"\#(registration)","apns":{"live_activity_token":"","payload":{"aps":\#(update)}}}"#,
                "message.apns.live_activity_token"
            ),
            (
                #"{"token":"\#(registration)","apns":{"live_activity_token":"\#(String(repeating: "ab", count: 201))","payload":{"aps":\#(update)}}}"#,
                "message.apns.live_activity_token"
            ),
            (
                #"{"token":"\#(registration)","apns":{"live_activity_token":7,"payload":{"aps":\#(update)}}}"#,
                "message.apns.live_activity_token"
            ),
            // The headers.
            (
                liveMessage(aps: update, headers: #"{"apns-push-type":"alert"}"#),
                "message.apns.headers.apns-push-type"
            ),
            (liveMessage(aps: update, headers: #"{"apns-priority":"1"}"#), "message.apns.headers.apns-priority"),
            (liveMessage(aps: update, headers: #"{"Apns-Priority":"1"}"#), "message.apns.headers.Apns-Priority"),
            // Two names for one header (header names are case-insensitive): which one counts would depend on a
            // dictionary's order, so a stored send could read as a Live Activity in one process and not in another.
            (
                #"{"topic":"scores","apns":{"headers":{"apns-push-type":"alert","APNS-Push-Type":"liveactivity"},"payload":{"aps":\#(update)}}}"#,
                "message.apns.headers.apns-push-type"
            ),
            (
                #"{"topic":"scores","webpush":{"headers":{"TTL":"60","ttl":"0"}}}"#,
                "message.webpush.headers.ttl"
            ),
            // liveactivity without an activity token: a token send lacks it; a condition send cannot have one (a topic
            // send goes to its followers or its channel, checked as every ActivityKit payload is: topicSends).
            (
                #"{"token":"\#(registration)","apns":{"headers":{"apns-push-type":"liveactivity"},"payload":{"aps":\#(update)}}}"#,
                "message.apns.live_activity_token"
            ),
            (
                #"{"topic":"scores","apns":{"headers":{"apns-push-type":"liveactivity"},"payload":{"aps":{"event":"update","content-state":{}}}}}"#,
                "message.apns.payload.aps.timestamp"
            ),
            (
                #"{"topic":"scores","apns":{"headers":{"apns-push-type":"liveactivity","apns-priority":"1"},"payload":{"aps":\#(update)}}}"#,
                "message.apns.headers.apns-priority"
            ),
            // A topic send's start names a type a push-to-start token can be registered for.
            (
                #"{"topic":"scores","apns":{"headers":{"apns-push-type":"liveactivity"},"payload":{"aps":{"timestamp":1,"event":"start","content-state":{},"attributes-type":"Match Attributes","attributes":{},"alert":{"title":"Kick-off"}}}}}"#,
                "message.apns.payload.aps.attributes-type"
            ),
            (
                #"{"condition":"'a' in topics","apns":{"headers":{"apns-push-type":"liveactivity"},"payload":{"aps":\#(update)}}}"#,
                "message.apns.headers.apns-push-type"
            ),
            // The payload.
            (
                #"{"token":"\#(registration)","apns":{"live_activity_token":"\#(activity)"}}"#,
                "message.apns.payload.aps"
            ),
            (liveMessage(aps: #"{"event":"update","content-state":{}}"#), "message.apns.payload.aps.timestamp"),
            (
                liveMessage(aps: #"{"timestamp":"1764201600","event":"update","content-state":{}}"#),
                "message.apns.payload.aps.timestamp"
            ),
            (
                liveMessage(aps: #"{"timestamp":1.5,"event":"update","content-state":{}}"#),
                "message.apns.payload.aps.timestamp"
            ),
            (
                liveMessage(aps: #"{"timestamp":-1,"event":"update","content-state":{}}"#),
                "message.apns.payload.aps.timestamp"
            ),
            (
                liveMessage(aps: #"{"timestamp":true,"event":"update","content-state":{}}"#),
                "message.apns.payload.aps.timestamp"
            ),
            (liveMessage(aps: #"{"timestamp":1,"content-state":{}}"#), "message.apns.payload.aps.event"),
            (
                liveMessage(aps: #"{"timestamp":1,"event":"pause","content-state":{}}"#),
                "message.apns.payload.aps.event"
            ),
            (
                liveMessage(aps: #"{"timestamp":1,"event":"Update","content-state":{}}"#),
                "message.apns.payload.aps.event"
            ),
            (liveMessage(aps: #"{"timestamp":1,"event":1,"content-state":{}}"#), "message.apns.payload.aps.event"),
            (liveMessage(aps: #"{"timestamp":1,"event":"update"}"#), "message.apns.payload.aps.content-state"),
            (
                liveMessage(aps: #"{"timestamp":1,"event":"end","content-state":"done"}"#),
                "message.apns.payload.aps.content-state"
            ),
            (
                liveMessage(aps: #"{"timestamp":1,"event":"update","content-state":[1]}"#),
                "message.apns.payload.aps.content-state"
            ),
            (
                liveMessage(aps: #"{"timestamp":1,"event":"end","stale-date":"tomorrow"}"#),
                "message.apns.payload.aps.stale-date"
            ),
            (
                liveMessage(aps: #"{"timestamp":1,"event":"end","dismissal-date":1.25}"#),
                "message.apns.payload.aps.dismissal-date"
            ),
            (
                liveMessage(aps: #"{"timestamp":1,"event":"end","relevance-score":"high"}"#),
                "message.apns.payload.aps.relevance-score"
            ),
            // At most 4 KB.
            (
                #"{"token":"\#(registration)","apns":{"live_activity_token":"\#(activity)","payload":{"aps":\#(update),"pad":"\#(String(repeating: "x", count: 4050))"}}}"#,
                "message.apns.payload"
            ),
            // A start: attributes-type, attributes and an alert.
            (
                liveMessage(
                    aps: #"{"timestamp":1,"event":"start","content-state":{},"attributes":{},"alert":"x"}"#),
                "message.apns.payload.aps.attributes-type"
            ),
            (
                liveMessage(
                    aps:
                        #"{"timestamp":1,"event":"start","content-state":{},"attributes-type":"","attributes":{},"alert":"x"}"#
                ),
                "message.apns.payload.aps.attributes-type"
            ),
            (
                liveMessage(
                    aps: #"{"timestamp":1,"event":"start","content-state":{},"attributes-type":"T","alert":"x"}"#),
                "message.apns.payload.aps.attributes"
            ),
            (
                liveMessage(
                    aps:
                        #"{"timestamp":1,"event":"start","content-state":{},"attributes-type":"T","attributes":[],"alert":"x"}"#
                ),
                "message.apns.payload.aps.attributes"
            ),
            (
                liveMessage(
                    aps: #"{"timestamp":1,"event":"start","content-state":{},"attributes-type":"T","attributes":{}}"#),
                "message.apns.payload.aps.alert"
            ),
            (
                liveMessage(aps: #"{"timestamp":1,"event":"start","attributes-type":"T","attributes":{},"alert":"x"}"#),
                "message.apns.payload.aps.content-state"
            ),
        ])
    func refused(json: String, field: String) throws {
        #expect(try refusedField(json) == field, "\(json)")
    }

    @Test(
        "numbers past every integer type, or with fractions and exponents, are refused or taken without trapping",
        arguments: [
            ("9223372036854775807", nil), ("0", nil), ("9223372036854775808", "timestamp"),
            ("18446744073709551616", "timestamp"), ("1e400", nil), ("-9223372036854775808", "timestamp"),
            ("1e30", "timestamp"), ("-0.0", nil), ("17642016e2", nil), ("1.0000000000000002", "timestamp"),
        ] as [(String, String?)])
    func bigNumbers(number: String, refusedKey: String?) throws {
        for key in ["timestamp", "stale-date", "dismissal-date"] {
            let aps =
                key == "timestamp"
                ? #"{"timestamp":\#(number),"event":"end"}"# : #"{"timestamp":1,"event":"end","\#(key)":\#(number)}"#
            let json = liveMessage(aps: aps)
            let expected = refusedKey.map { _ in "message.apns.payload.aps.\(key)" }
            // `1e400` is not a JSON number the parser takes (it is not finite): refused before these rules.
            guard (try? JSONValue(parsing: Array(json.utf8))) != nil else { continue }
            #expect(try refusedField(json) == expected, "\(key): \(number)")
        }
        // A relevance score is any number.
        let score = liveMessage(aps: #"{"timestamp":1,"event":"end","relevance-score":\#(number)}"#)
        if (try? JSONValue(parsing: Array(score.utf8))) != nil {
            #expect(try refusedField(score) == nil, "relevance-score: \(number)")
        }
    }

    @Test("an ordinary message is not held to the Live Activity rules")
    func ordinary() throws {
        #expect(
            try refusedField(
                #"{"token":"\#(registration)","apns":{"headers":{"apns-priority":"1"},"payload":{"aps":{"alert":"hi"}}}}"#
            ) == nil)
        #expect(try refusedField(#"{"topic":"news","apns":{"payload":{"aps":{"event":"whatever"}}}}"#) == nil)
    }

    @Test("the iOS delivery: pushType liveactivity, priority 10 unless 5 is asked, to the activity's token")
    func delivery() throws {
        let message = try validate(liveMessage(aps: update))
        let payload = DevicePayload(
            ofMessageJSON: message.json, messageID: 9, target: message.target, project: project, platform: .ios)
        #expect(payload.pushType == "liveactivity")
        #expect(payload.priority == .high)
        let expected = try APNsDeviceToken(hex: activity, sandbox: false)
        #expect(payload.apnsDestination == .liveActivity(token: expected.bytes))
        // The payload is the iOS mapping of every message: aps as given, gcm.message_id, from.
        let aps = try #require(try JSONValue(parsing: payload.json).object?["aps"]?.object)
        #expect(aps["event"] == .string("update") && aps["timestamp"] == .integer(1_764_201_600))

        let low = try validate(liveMessage(aps: update, headers: #"{"apns-priority":"5"}"#))
        #expect(
            DevicePayload(ofMessageJSON: low.json, messageID: 9, target: low.target, project: project).priority
                == .normal)

        // The activity's token goes to the environment of the device's own APNs token.
        let sandboxDevice = try APNsDeviceToken(hex: String(repeating: "0f", count: 32), sandbox: true)
        let pushed = try #require(payload.apnsDestination.token(holding: sandboxDevice))
        #expect(pushed.bytes == expected.bytes && pushed.sandbox)
        #expect(APNsDestination.device.token(holding: sandboxDevice) == sandboxDevice)
        #expect(APNsDestination.none.token(holding: sandboxDevice) == nil)
        #expect(LiveActivityMessage.topic(bundleID: "com.example.app") == "com.example.app.push-type.liveactivity")
    }

    @Test(
        "a stored message asking for a Live Activity push it cannot make (ledger import) pushes nowhere, not to the device"
    )
    func storedWithoutValidation() throws {
        let target = MessageTarget.token(try RegistrationToken(registration))
        let topic = MessageTarget.topic(try TopicName("scores"))
        let cases: [(String, MessageTarget, APNsDestination)] = [
            (#"{"apns":{"live_activity_token":"zz"}}"#, target, .none),
            (#"{"apns":{"live_activity_token":"\#(activity)"}}"#, topic, .none),
            (#"{"apns":{"headers":{"apns-push-type":"liveactivity"}}}"#, target, .none),
            // A topic's liveactivity send without an ActivityKit event, or with an activity token, is nowhere.
            (#"{"apns":{"headers":{"apns-push-type":"liveactivity"}}}"#, topic, .none),
            (
                #"{"apns":{"headers":{"apns-push-type":"liveactivity"},"live_activity_token":"\#(activity)"}}"#, topic,
                .none
            ),
            (#"{"apns":{"live_activity_token":"\#(activity)","headers":{"apns-push-type":"alert"}}}"#, target, .none),
            (#"{"apns":{"headers":{"apns-push-type":"alert"}}}"#, target, .device),
            (#"{"apns":"x"}"#, target, .device),
            ("[]", target, .device),
        ]
        for (json, target, expected) in cases {
            let message = DevicePayload.object(ofMessageJSON: Array(json.utf8))
            #expect(APNsDestination(message: message, target: target) == expected, "\(json)")
        }
    }

    @Test(
        "a topic send with apns-push-type liveactivity: update and end to the followers, start to push-to-start tokens"
    )
    func topicSends() throws {
        let scores = try TopicName("scores")
        func topicMessage(_ aps: String) -> String {
            #"{"topic":"scores","apns":{"headers":{"apns-push-type":"liveactivity","apns-priority":"5"},"payload":{"aps":\#(aps)}}}"#
        }
        let end = #"{"timestamp":1764201600,"event":"end"}"#
        for (aps, expected, ends) in [
            (update, APNsDestination.topicFollowers(topic: scores), false),
            (end, .topicFollowers(topic: scores), true),
            (start, .pushToStart(attributesType: "MatchAttributes"), false),
        ] {
            let validated = try validate(topicMessage(aps))
            let message = DevicePayload.object(ofMessageJSON: validated.json)
            #expect(APNsDestination(message: message, target: validated.target) == expected, "\(aps)")
            #expect((APNsDestination.endsTopicActivity(message, target: validated.target) == scores) == ends)
            // Recorded on a channel (the project broadcasts, the topic had one at the send): an update or end is the
            // channel's one broadcast; a start still goes to each push-to-start token (broadcasts start nothing).
            let recorded = APNsDestination(message: message, target: validated.target, broadcastChannel: "Y2hhbm5lbA==")
            let broadcastable = expected.topicActivity == .followers
            #expect(recorded == (broadcastable ? .channel : expected), "\(aps)")
            #expect(broadcastable == (aps != start))
            let payload = DevicePayload(
                ofMessageJSON: validated.json, messageID: 7, target: validated.target, project: project, platform: .ios)
            #expect(payload.pushType == "liveactivity" && payload.priority == .normal)
            #expect(payload.apnsDestination.isLiveActivity)
        }
        // A follower's token goes out in its device's environment; without one, nothing is pushed.
        let device = try APNsDeviceToken(bytes: Array(repeating: 1, count: 32), sandbox: true)
        let followed = try APNsDeviceToken(bytes: Array(repeating: 2, count: 32), sandbox: false)
        let destination = APNsDestination.topicFollowers(topic: scores)
        #expect(destination.token(holding: device, activityToken: followed)?.sandbox == true)
        #expect(destination.token(holding: device, activityToken: followed)?.bytes == followed.bytes)
        #expect(destination.token(holding: device, activityToken: nil) == nil)
        #expect(destination.token(holding: device) == nil)
        // The same message to a condition is still refused, naming the header.
        let condition =
            #"{"condition":"'a' in topics","apns":{"headers":{"apns-push-type":"liveactivity"},"payload":{"aps":\#(update)}}}"#
        #expect(try refusedField(condition) == "message.apns.headers.apns-push-type")
    }
}
