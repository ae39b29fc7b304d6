import Foundation
import LedgerCore

/// Reading and validating a send's body, as `POST …/messages:send` does after its strict checks: the
/// parser (`JSONValue(parsing:)`) against `JSONSerialization` followed by the conversion of its `Any` tree
/// (how the route read bodies before), each followed by the same validation and stored-message encoding.
/// The baseline is a low bound of the old route's cost: it validated the `Any` tree itself, through more
/// dynamic casts than the one conversion measured here.
enum MessageWorkload {
    /// The body `tools/bench/wrk/send.lua` sends.
    static let small = #"{"message":{"topic":"batch-3","data":{"k":"v"}}}"#

    /// What firebase-admin sends for a message with every platform's block.
    static let rich = #"""
        {"message":{"topic":"news","notification":{"title":"Breaking","body":"Something happened","image":"https://example.com/i.png"},
         "data":{"story":"42","kind":"breaking","ts":"1764028800"},
         "android":{"priority":"high","ttl":"3600s","collapse_key":"news","notification":{"channel_id":"news","click_action":"OPEN","notification_count":3}},
         "apns":{"headers":{"apns-priority":"10","apns-push-type":"alert"},"payload":{"aps":{"badge":3,"sound":"default","mutable-content":1},"story":"42"}},
         "webpush":{"headers":{"TTL":"3600","Urgency":"high"},"notification":{"icon":"/i.png","actions":[{"action":"open","title":"Open"}]},"fcm_options":{"link":"https://example.com/news/42"}},
         "fcm_options":{"analytics_label":"breaking"}},"validate_only":false}
        """#

    static func run() -> [BenchResult] {
        [(small, "send body (wrk's send.lua)"), (rich, "send body with every platform block")].map { body, name in
            rate(of: Array(body.utf8), name: name)
        }
    }

    static func rate(of body: [UInt8], name: String) -> BenchResult {
        let rounds = body.count > 200 ? 5_000 : 50_000
        var stored = 0
        func accept(_ value: JSONValue?) {
            guard let message = value?.object?["message"]?.object,
                let validated = try? MessageValidation.validate(message, precedence: .standard)
            else { fatalError("the bench's message does not validate") }
            stored &+= validated.json.count
        }
        let parserSeconds = median(runs: 7) {
            for _ in 0..<rounds { accept(try? JSONValue(parsing: body)) }
        }
        let data = Data(body)
        let foundationSeconds = median(runs: 7) {
            for _ in 0..<rounds {
                accept((try? JSONSerialization.jsonObject(with: data)).flatMap(JSONValue.init))
            }
        }
        precondition(stored > 0)
        return BenchResult(
            name: "\(name): parse + validate", unit: "messages/s", value: Double(rounds) / parserSeconds,
            baselineName: "JSONSerialization + conversion + the same validation",
            baseline: Double(rounds) / foundationSeconds, notes: "\(body.count) bytes")
    }
}
