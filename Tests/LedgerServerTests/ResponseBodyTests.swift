import Foundation
import LedgerCore
import LedgerTestSupport
import PropertyBased
import Testing

@testable import LedgerServer
import FCMWire

/// The bodies written byte by byte on hot routes against what `JSONResponse.encoded` (JSONEncoder, keys sorted)
/// writes for the same value.
@Suite("Hand-written response bodies match JSONEncoder's")
struct ResponseBodyTests {
    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    @Test("batchAdd results: the same bytes for every mix of successes and the codes the route answers")
    func batchResponse() async throws {
        let codes = ["INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "NOT_FOUND", "TOO_MANY_TOPICS", "INTERNAL"]
        await propertyCheck(count: 500, input: Gen.uint64()) { seed in
            var generator = SeededGenerator(seed: seed)
            let results = (0..<Int.random(in: 0...40, using: &generator)).map { _ in
                InstanceIDRoutes.BatchResponse.Result(
                    error: Bool.random(using: &generator) ? nil : codes.randomElement(using: &generator))
            }
            let response = InstanceIDRoutes.BatchResponse(results: results)
            #expect(response.json == (try? Self.encoder.encode(response)).map { Array($0) }, "\(results)")
        }
    }

    @Test("batchAdd results with strings that need escaping still decode to what JSONEncoder's do")
    func batchResponseEscapes() throws {
        let odd = ["a\"b", "back\\slash", "new\nline", "tab\t", "slash/", "été", "\u{1}\u{8}\u{c}\u{1f}", "😀"]
        let response = InstanceIDRoutes.BatchResponse(results: odd.map { .init(error: $0) } + [.init(error: nil)])
        let ours = try JSONSerialization.jsonObject(with: Data(response.json)) as? [String: [[String: String]]]
        let theirs =
            try JSONSerialization.jsonObject(with: Self.encoder.encode(response)) as? [String: [[String: String]]]
        #expect(ours != nil)
        #expect(ours == theirs)
    }

    @Test("a send's answer: the same bytes for random projects and message ids, and for names that need escaping")
    func messageName() async throws {
        await propertyCheck(count: 300, input: Gen.uint64()) { seed in
            var generator = SeededGenerator(seed: seed)
            let project = String(
                (0..<Int.random(in: 6...30, using: &generator)).map { _ in
                    Array("abcdefghijklmnopqrstuvwxyz0123456789-").randomElement(using: &generator)!
                })
            let name = MessageName(name: "projects/\(project)/messages/\(generator.next() >> 1)")
            #expect(name.json == (try? Self.encoder.encode(name)).map { Array($0) }, "\(name.name)")
        }
        for odd in ["a\"b", "back\\slash", "new\nline", "\u{1}", "été", "😀", "slash/"] {
            let name = MessageName(name: odd)
            let ours = try JSONSerialization.jsonObject(with: Data(name.json)) as? [String: String]
            #expect(ours == ["name": odd])
        }
    }

    @Test("a topic subscription resource: the same bytes for random valid tokens, topics and times")
    func subscriptionResource() async throws {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
        await propertyCheck(count: 300, input: Gen.uint64()) { seed in
            var generator = SeededGenerator(seed: seed)
            func text(_ length: ClosedRange<Int>) -> String {
                String(
                    (0..<Int.random(in: length, using: &generator)).map { _ in
                        alphabet.randomElement(using: &generator)!
                    })
            }
            guard let token = try? RegistrationToken(text(20...180)), let topic = try? TopicName(text(1...80)) else {
                Issue.record("the generator made an invalid token or topic")
                return
            }
            let resource = TopicSubscriptionResource(
                project: .default, token: token, topic: topic,
                created: LedgerTime(microseconds: Int64.random(in: 0...4_102_444_800_000_000, using: &generator)))
            #expect(resource.json == (try? Self.encoder.encode(resource)).map { Array($0) }, "\(token) \(topic)")
        }
    }
}
