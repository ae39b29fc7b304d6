import FCMWire
import Foundation
import LedgerCore
import LedgerTestSupport
import Testing

/// A random JSON value of at most `depth` levels: strings with escapes, slashes and non-ASCII text, integers
/// at the edges of their types, fractions, booleans, null, arrays and objects with clashing-case keys.
private func randomJSON(depth: Int, using generator: inout SeededGenerator) -> Any {
    let pieces = ["a", "B", "/", "\\", "\"", "é", "日本", "\n", "\u{1F600}", "10", "2", " ", "\u{7F}", "\u{1}"]
    func text() -> String {
        (0..<Int.random(in: 0...6, using: &generator)).map { _ in pieces.randomElement(using: &generator)! }.joined()
    }
    switch Int.random(in: 0..<(depth > 0 ? 9 : 6), using: &generator) {
    case 0: return text()
    case 1: return [Int64.min, -1, 0, 7, Int64.max].randomElement(using: &generator)!
    case 2: return UInt64.max
    case 3: return [0.5, -1.25, 1e-7, 3.0e200].randomElement(using: &generator)!
    case 4: return Bool.random(using: &generator)
    case 5: return NSNull()
    case 6, 7:
        var object: [String: Any] = [:]
        for _ in 0..<Int.random(in: 0...4, using: &generator) {
            object[text()] = randomJSON(depth: depth - 1, using: &generator)
        }
        return object
    default:
        let count = Int.random(in: 0...3, using: &generator)
        return (0..<count).map { _ in randomJSON(depth: depth - 1, using: &generator) }
    }
}

/// A message object as the send route reads it.
private func messageObject(_ json: String) throws -> [String: JSONValue] {
    try #require(try JSONValue(parsing: Array(json.utf8)).object)
}

@Suite("What a device receives for a message", .offThePool)
struct DevicePayloadTests {
    let project = try! ProjectID("shop-prod")

    func validated(_ json: String) throws -> ValidatedMessage {
        let object = try messageObject(json)
        return try MessageValidation.validate(object, precedence: .standard)
    }

    /// The payload's JSON, parsed back.
    func parsed(_ payload: DevicePayload) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(payload.json)) as? [String: Any])
    }

    @Test(
        "a topic send: data keys at the top level, from /topics/T, aps.alert from the notification, its image as fcm_options"
    )
    func topicSend() throws {
        let message = try validated(
            #"{"topic":"news","data":{"story":"42","kind":"breaking \"now\" é\n"},"notification":{"title":"T","body":"B","image":"https://x/i.png"}}"#
        )
        let payload = try parsed(
            DevicePayload(ofMessageJSON: message.json, messageID: 7_000_001, target: message.target, project: project))
        #expect(payload["story"] as? String == "42")
        #expect(payload["kind"] as? String == "breaking \"now\" é\n")
        #expect(payload["gcm.message_id"] as? String == "7000001")
        #expect(payload["from"] as? String == "/topics/news")
        let alert = (payload["aps"] as? [String: Any])?["alert"] as? [String: Any]
        #expect(alert?["title"] as? String == "T")
        #expect(alert?["body"] as? String == "B")
        #expect(alert?.count == 2)
        #expect((payload["fcm_options"] as? [String: String]) == ["image": "https://x/i.png"])
        #expect(payload.count == 6)
    }

    @Test("the JSON has its keys in code-point order, so equal payloads are equal bytes")
    func sortedKeys() throws {
        let message = try validated(#"{"topic":"t","data":{"b":"1","a":"2","B":"3"},"notification":{"title":"x"}}"#)
        let payload = DevicePayload(ofMessageJSON: message.json, messageID: 5, target: message.target, project: project)
        #expect(
            String(decoding: payload.json, as: UTF8.self)
                == #"{"B":"3","a":"2","aps":{"alert":{"title":"x"}},"b":"1","from":"/topics/t","gcm.message_id":"5"}"#)
    }

    @Test("a condition or token send comes from the project; no notification means no aps")
    func conditionSend() throws {
        let message = try validated(#"{"condition":"'a' in topics || 'b' in topics","data":{"k":"v"}}"#)
        let payload = try parsed(
            DevicePayload(ofMessageJSON: message.json, messageID: 1, target: message.target, project: project))
        #expect(payload["from"] as? String == "shop-prod")
        #expect(payload["aps"] == nil)
        #expect(Set(payload.keys) == ["k", "gcm.message_id", "from"])
    }

    @Test("a stored message that is not what validation produces maps to the fixed keys, without trapping")
    func damagedStoredMessage() throws {
        for json in ["", "[1,2]", "null", #"{"data":{"n":1,"aps":"x"},"notification":"x"}"#, "{\"data\":\"x\"}"] {
            let payload = try parsed(
                DevicePayload(
                    ofMessageJSON: Array(json.utf8), messageID: .max, target: .condition("x"), project: project))
            #expect(Set(payload.keys) == ["gcm.message_id", "from"], "for \(json)")
            #expect(payload["gcm.message_id"] as? String == "18446744073709551615")
        }
    }
}

@Suite("Platform mappings: what an iOS, Android or web device receives", .offThePool)
struct PlatformPayloadTests {
    let project = try! ProjectID("shop-prod")

    func payload(_ json: String, _ platform: DevicePlatform, id: UInt64 = 9) throws -> (DevicePayload, [String: Any]) {
        let object = try messageObject(json)
        let message = try MessageValidation.validate(object, precedence: .standard)
        let payload = DevicePayload(
            ofMessageJSON: message.json, messageID: id, target: message.target, project: project, platform: platform)
        let parsed = try #require(try JSONSerialization.jsonObject(with: Data(payload.json)) as? [String: Any])
        return (payload, parsed)
    }

    static let rich = #"""
        {"topic":"weather","data":{"city":"Lyon","kind":"rain"},
         "notification":{"title":"Rain","body":"Take an umbrella","image":"https://img.example/rain.png"},
         "apns":{"headers":{"apns-priority":"10","apns-collapse-id":"forecast","apns-push-type":"alert"},
                 "payload":{"aps":{"sound":"chime.caf","badge":3,"mutable-content":1,"category":"FORECAST",
                                   "thread-id":"lyon"},"kind":"storm","trace":{"n":1}},
                 "fcm_options":{"image":"https://img.example/rain-ios.png"}},
         "android":{"collapse_key":"forecast-a","priority":"HIGH","ttl":"3600s","data":{"only":"android"},
                    "notification":{"channel_id":"weather","color":"#3366ff","clickAction":"OPEN","title":"Rain!"}},
         "webpush":{"headers":{"Topic":"forecast-w","Urgency":"high","TTL":"60"},"data":{"only":"web"},
                    "notification":{"icon":"/icon.png","requireInteraction":true,"body":"Umbrella"},
                    "fcm_options":{"link":"https://weather.example/lyon"}}}
        """#

    @Test(
        "iOS: apns.payload.aps merged into aps with the notification's alert, apns.payload keys beside data (and winning), the image as fcm_options, headers as delivery attributes"
    )
    func ios() throws {
        let (payload, parsed) = try payload(Self.rich, .ios)
        let aps = try #require(parsed["aps"] as? [String: Any])
        #expect(aps["sound"] as? String == "chime.caf")
        #expect(aps["badge"] as? Int == 3)
        #expect(aps["mutable-content"] as? Int == 1)
        #expect(aps["category"] as? String == "FORECAST")
        #expect(aps["thread-id"] as? String == "lyon")
        let alert = try #require(aps["alert"] as? [String: Any])
        #expect(alert as? [String: String] == ["title": "Rain", "body": "Take an umbrella"])
        #expect(parsed["city"] as? String == "Lyon")
        #expect(parsed["kind"] as? String == "storm", "apns.payload wins over data")
        #expect((parsed["trace"] as? [String: Any])?["n"] as? Int == 1)
        #expect((parsed["fcm_options"] as? [String: String]) == ["image": "https://img.example/rain-ios.png"])
        #expect(parsed["gcm.message_id"] as? String == "9")
        #expect(parsed["from"] as? String == "/topics/weather")
        #expect(Set(parsed.keys) == ["aps", "city", "kind", "trace", "fcm_options", "gcm.message_id", "from"])
        #expect(payload.collapseKey == "forecast")
        #expect(payload.priority == .high)
        #expect(payload.pushType == "alert")
        // Booleans and integers keep their JSON types through the mapping.
        #expect(String(decoding: payload.json, as: UTF8.self).contains(#""badge":3"#))
    }

    @Test(
        "iOS: apns.payload.aps.alert wins over the notification; notification.image is the image without apns.fcm_options"
    )
    func iosAlertWins() throws {
        let (_, parsed) = try payload(
            #"{"topic":"t","notification":{"title":"N","image":"https://i.example/n.png"},"apns":{"payload":{"aps":{"alert":"from apns"}}}}"#,
            .ios)
        #expect((parsed["aps"] as? [String: Any])?["alert"] as? String == "from apns")
        #expect((parsed["fcm_options"] as? [String: String]) == ["image": "https://i.example/n.png"])
    }

    @Test("iOS: a silent push (content-available alone) is a background push of normal priority, without an alert")
    func silentPush() throws {
        let (payload, parsed) = try payload(
            #"{"topic":"t","data":{"sync":"1"},"apns":{"payload":{"aps":{"content-available":1}}}}"#, .ios)
        #expect((parsed["aps"] as? [String: Any])?.keys.sorted() == ["content-available"])
        #expect(payload.pushType == "background")
        #expect(payload.priority == .normal)
        #expect(payload.collapseKey == nil)
        // apns-priority given: it decides.
        let (urgent, _) = try self.payload(
            #"{"topic":"t","apns":{"headers":{"apns-priority":"10"},"payload":{"aps":{"content-available":1}}}}"#, .ios)
        #expect(urgent.priority == .high)
    }

    @Test(
        "Android: RemoteMessage's fields; android.notification overrides the notification (in lowerCamelCase), android.data replaces data"
    )
    func android() throws {
        let (payload, parsed) = try payload(Self.rich, .android)
        #expect(parsed["data"] as? [String: String] == ["only": "android"])
        let notification = try #require(parsed["notification"] as? [String: Any])
        #expect(notification["title"] as? String == "Rain!")
        #expect(notification["body"] as? String == "Take an umbrella")
        #expect(notification["image"] as? String == "https://img.example/rain.png")
        #expect(notification["channelId"] as? String == "weather")
        #expect(notification["color"] as? String == "#3366ff")
        #expect(notification["clickAction"] as? String == "OPEN")
        #expect(notification.count == 6)
        #expect(parsed["collapseKey"] as? String == "forecast-a")
        #expect(parsed["priority"] as? String == "high")
        #expect(parsed["ttl"] as? Int == 3600)
        #expect(parsed["messageId"] as? String == "9")
        #expect(parsed["from"] as? String == "/topics/weather")
        #expect(parsed.count == 7)
        #expect(payload.collapseKey == "forecast-a")
        #expect(payload.priority == .high)
        #expect(payload.pushType == nil)
        // A data message: data as sent, normal priority, the 4-week TTL.
        let (plain, data) = try self.payload(#"{"condition":"'a' in topics","data":{"k":"v"}}"#, .android)
        #expect(data["data"] as? [String: String] == ["k": "v"])
        #expect(data["notification"] == nil)
        #expect(data["ttl"] as? Int == 2_419_200)
        #expect(data["from"] as? String == "shop-prod")
        #expect(plain.priority == .normal)
    }

    @Test(
        "Web: the JavaScript SDK's MessagePayload; webpush.notification over the notification, fcmOptions.link, the Topic header as collapse key"
    )
    func web() throws {
        let (payload, parsed) = try payload(Self.rich, .web)
        #expect(parsed["data"] as? [String: String] == ["only": "web"])
        let notification = try #require(parsed["notification"] as? [String: Any])
        #expect(notification["title"] as? String == "Rain")
        #expect(notification["body"] as? String == "Umbrella")
        #expect(notification["icon"] as? String == "/icon.png")
        #expect(notification["requireInteraction"] as? Bool == true)
        #expect(notification["image"] as? String == "https://img.example/rain.png")
        #expect((parsed["fcmOptions"] as? [String: String]) == ["link": "https://weather.example/lyon"])
        #expect(parsed["collapseKey"] as? String == "forecast-w")
        #expect(parsed["messageId"] as? String == "9")
        #expect(parsed.count == 6)
        #expect(payload.priority == .high)
        #expect(String(decoding: payload.json, as: UTF8.self).contains(#""requireInteraction":true"#))
    }

    @Test("a damaged stored message maps to each platform's fixed keys without trapping")
    func damaged() throws {
        for platform in DevicePlatform.allCases {
            for json in [
                "", "[1]",
                #"{"android":"x","apns":{"payload":[1],"headers":7},"webpush":{"data":{"a":1}},"notification":5}"#,
            ] {
                let payload = DevicePayload(
                    ofMessageJSON: Array(json.utf8), messageID: 1, target: .condition("x"), project: project,
                    platform: platform)
                let parsed = try #require(try JSONSerialization.jsonObject(with: Data(payload.json)) as? [String: Any])
                #expect(parsed["from"] as? String == "shop-prod", "\(platform) \(json)")
                #expect(payload.collapseKey == nil)
            }
        }
    }

    @Test("platform configurations follow the v1 proto types: bad ones name their field")
    func badConfigurations() throws {
        let cases: [(String, String)] = [
            (#"{"apns":{"headers":{"apns-push-type":"shout"}}}"#, "message.apns.headers.apns-push-type"),
            (
                #"{"apns":{"headers":{"apns-collapse-id":"\#(String(repeating: "k", count: 65))"}}}"#,
                "message.apns.headers.apns-collapse-id"
            ),
            (#"{"apns":{"payload":{"aps":"x"}}}"#, "message.apns.payload.aps"),
            (#"{"apns":{"payload":{"aps":{"content-available":true}}}}"#, "message.apns.payload.aps.content-available"),
            (#"{"apns":{"payload":{"aps":{"sound":5}}}}"#, "message.apns.payload.aps.sound"),
            (#"{"apns":{"fcm_options":{"image":1}}}"#, "message.apns.fcm_options.image"),
            (#"{"apns":{"fcmOptions":{"colour":"x"}}}"#, "message.apns.fcm_options.colour"),
            (#"{"apns":{"extra":1}}"#, "message.apns.extra"),
            (#"{"android":{"notification":{"sticky":"yes"}}}"#, "message.android.notification.sticky"),
            (
                #"{"android":{"notification":{"notification_count":1.5}}}"#,
                "message.android.notification.notification_count"
            ),
            (#"{"android":{"notification":{"visibility":"HIDDEN"}}}"#, "message.android.notification.visibility"),
            (
                #"{"android":{"notification":{"vibrate_timings":["1s","x"]}}}"#,
                "message.android.notification.vibrate_timings[1]"
            ),
            (#"{"android":{"data":{"k":1}}}"#, "message.android.data.k"),
            (#"{"android":{"data":{"gcm.x":"1"}}}"#, "message.android.data.gcm.x"),
            (#"{"android":{"collapse_key":"a","collapseKey":"b"}}"#, "message.android"),
            (#"{"android":{"direct_boot_ok":1}}"#, "message.android.direct_boot_ok"),
            (#"{"webpush":{"headers":{"TTL":"-1"}}}"#, "message.webpush.headers.TTL"),
            (#"{"webpush":{"headers":{"Urgency":"now"}}}"#, "message.webpush.headers.Urgency"),
            (#"{"webpush":{"notification":[1]}}"#, "message.webpush.notification"),
            (#"{"webpush":{"data":{"from":"x"}}}"#, "message.webpush.data.from"),
            (#"{"fcm_options":{"analytics_label":1}}"#, "message.fcm_options.analytics_label"),
            (#"{"fcm_options":{},"fcmOptions":{}}"#, "message.fcm_options"),
        ]
        for (config, field) in cases {
            var object = try messageObject(config)
            object["topic"] = .string("t")
            #expect(throws: LedgerCoreError.self, "\(config)") {
                try MessageValidation.validate(object, precedence: .standard)
            }
            do {
                _ = try MessageValidation.validate(object, precedence: .standard)
            } catch {
                #expect(error.field?.hasPrefix(field) == true, "\(config): \(error.field ?? "-") \(error)")
            }
        }
        // What the Admin SDKs send is accepted, in either spelling.
        let accepted = #"""
            {"topic":"t","fcmOptions":{"analyticsLabel":"x"},
             "android":{"priority":"high","ttl":"3.5s","restrictedPackageName":"com.example","directBootOk":true,
                        "notification":{"title":"T","bodyLocArgs":["a"],"notificationPriority":"PRIORITY_HIGH",
                                        "visibility":"PRIVATE","notification_count":2,"vibrate_timings":["0.5s"],
                                        "light_settings":{"color":{"red":1}},"default_sound":false,"eventTime":"2026-11-23T00:00:00Z"},
                        "fcm_options":{"analytics_label":"y"}},
             "apns":{"headers":{"apns-priority":"5","apns-expiration":"0"},"payload":{"aps":{"alert":{"title":"T"},"content-available":1}},"fcm_options":{"image":"https://x/y.png"}},
             "webpush":{"headers":{"TTL":"99999999999999999999","Urgency":"very-low"},"notification":{"badge":"/b.png"},"fcmOptions":{"link":"https://x.example/"}}}
            """#
        let object = try messageObject(accepted)
        _ = try MessageValidation.validate(object, precedence: .standard)
    }

    @Test("the stored message is the accepted object without its name: same values, keys in code-point order")
    func storedMessage() throws {
        var generator = SeededGenerator(seed: 14)
        for round in 0..<300 {
            // Through JSON text and the parser, as a request body arrives.
            let custom = randomJSON(depth: 3, using: &generator)
            let input: [String: Any] = [
                "topic": "news", "name": "projects/p/messages/1",
                "data": ["k/1": "v/é", "Z": "\"quoted\"", "a": ""],
                "apns": ["payload": ["aps": ["content-available": 1], "custom": custom, "z-flag": true, "z-num": 1.5]],
            ]
            let body = try JSONSerialization.data(withJSONObject: input)
            let object = try #require(try JSONValue(parsing: body).object)
            let message = try MessageValidation.validate(object, precedence: .standard)
            var expected = object
            expected["name"] = nil
            #expect(try JSONValue(parsing: message.json) == .object(expected), "round \(round)")
            // Foundation reads the same values from the stored text as from the body (without its name).
            let stored = try #require(try JSONSerialization.jsonObject(with: Data(message.json)) as? [String: Any])
            let sent = try #require(try JSONSerialization.jsonObject(with: body) as? [String: Any])
            #expect(JSONValue(stored) == JSONValue(sent.filter { $0.key != "name" }), "round \(round)")
            #expect(!message.json.contains(UInt8(ascii: "\n")), "round \(round): one line")
            // Keys in code-point order at every level: reading the text, each object's keys ascend.
            let text = String(decoding: message.json, as: UTF8.self)
            #expect(text.hasPrefix(#"{"apns":{"payload":{"aps":{"content-available":1},"#), "round \(round)")
            #expect(text.contains(#""data":{"Z":"\"quoted\"","a":"","k/1":"v/é"}"#), "round \(round): \(text)")
            #expect(text.hasSuffix(#""topic":"news"}"#), "round \(round)")
            // Booleans stay booleans and fractions fractions (the comparison above would not see `true`
            // turned into 1 on both sides).
            #expect(text.contains(#","z-flag":true,"z-num":1.5}}"#), "round \(round): \(text)")
        }
    }
}
