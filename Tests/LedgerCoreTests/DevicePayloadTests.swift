import Foundation
import LedgerCore
import Testing

@Suite("What a device receives for a message")
struct DevicePayloadTests {
    let project = try! ProjectID("shop-prod")

    func validated(_ json: String) throws -> ValidatedMessage {
        let object = try JSONSerialization.jsonObject(with: Data(json.utf8)) as! [String: Any]
        return try MessageValidation.validate(object, precedence: .standard)
    }

    /// The payload's JSON, parsed back.
    func parsed(_ payload: DevicePayload) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(payload.json)) as? [String: Any])
    }

    @Test("a topic send: data keys at the top level, from /topics/T, aps.alert from the notification")
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
        #expect(payload.count == 5)
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
