import FCMWire
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
        } + [batchBodyRate(), importLineRate()]
    }

    /// The Instance ID batch body of 1,000 tokens (what `tools/bench/wrk` sends to `v1:batchAdd`), read by the
    /// byte-level reader the route uses (`TopicBatchBody(json:)`, on ``FlatJSONObject``) against `JSONDecoder`
    /// decoding the same shape (`TopicBatchBody.Decoded`, what the reader is tested against).
    static func batchBodyRate() -> BenchResult {
        let tokens = (0..<1000).map { "\"bench-token-\($0)-" + String(repeating: "x", count: 140) + "\"" }
        let body =
            Array(#"{"to":"/topics/batch-1","registration_tokens":["#.utf8) + Array(tokens.joined(separator: ",").utf8)
            + Array("]}".utf8)
        let rounds = 300
        var kept = 0
        let readerSeconds = median(runs: 7) {
            for _ in 0..<rounds {
                kept &+= body.withUnsafeBufferPointer { TopicBatchBody(json: $0) }?.registrationTokens.count ?? 0
            }
        }
        let decoder = JSONDecoder()
        let data = Data(body)
        let decoderSeconds = median(runs: 7) {
            for _ in 0..<rounds {
                kept &+=
                    (try? decoder.decode(TopicBatchBody.Decoded.self, from: data))?.body.registrationTokens.count ?? 0
            }
        }
        precondition(kept > 0, "the readers read the tokens")
        return BenchResult(
            name: "batch body (1000 tokens): TopicBatchBody on FlatJSONObject", unit: "bodies/s",
            value: Double(rounds) / readerSeconds, baselineName: "JSONDecoder, the same shape",
            baseline: Double(rounds) / decoderSeconds, notes: "\(body.count) bytes; ratio > 100 %: the reader is faster"
        )
    }

    /// One `ledger import` line, read into its string fields by ``FlatJSONObject`` (what
    /// `OperationImport.parse(line:number:)` does) against `JSONDecoder` decoding a struct of the same fields.
    static func importLineRate() -> BenchResult {
        let line = Array(
            #"{"op":"subscribe","token":"import-token-000042-abcdefghijklmnopqrstuvwxyz0123456789","topic":"weather-paris","via":"iid","time":"2026-11-27T10:00:00Z"}"#
                .utf8)
        let rounds = 100_000
        var kept = 0
        let readerSeconds = median(runs: 7) {
            for _ in 0..<rounds {
                line.withUnsafeBufferPointer { bytes in
                    try? FlatJSONObject.forEachMember(in: bytes) { _, value in
                        if case .string(let text) = value { kept &+= text.utf8.count }
                    }
                }
            }
        }
        let decoder = JSONDecoder()
        let data = Data(line)
        let decoderSeconds = median(runs: 7) {
            for _ in 0..<rounds {
                if let fields = try? decoder.decode(ImportLineFields.self, from: data) { kept &+= fields.length }
            }
        }
        precondition(kept > 0)
        return BenchResult(
            name: "import line: FlatJSONObject", unit: "lines/s", value: Double(rounds) / readerSeconds,
            baselineName: "JSONDecoder into a struct of the same fields", baseline: Double(rounds) / decoderSeconds,
            notes: "\(line.count) bytes; ratio > 100 %: the reader is faster")
    }

    /// The fields of an import line, for `JSONDecoder`.
    private struct ImportLineFields: Decodable {
        let op: String?
        let token: String?
        let topic: String?
        let via: String?
        let time: String?

        var length: Int { [op, token, topic, via, time].reduce(0) { $0 + ($1?.utf8.count ?? 0) } }
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
