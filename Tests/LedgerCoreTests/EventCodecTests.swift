import Foundation
import LedgerCore
import LedgerTestSupport
import PropertyBased
import Testing

/// Builds a random event of any kind from a seed.
func randomEvent(seed: UInt64) -> LedgerEvent {
    var random = SeededGenerator(seed: seed)
    func text(_ alphabet: String, _ length: ClosedRange<Int>) -> String {
        let characters = Array(alphabet)
        return String(
            (0..<Int.random(in: length, using: &random)).map { _ in characters.randomElement(using: &random)! })
    }
    let token = try! RegistrationToken(text("abcXYZ019_:.-", 1...200))
    let topic = try! TopicName(text("abcXYZ019-_.~%", 1...60))
    let via = SubscriptionChannel.allCases.randomElement(using: &random)!
    let body: LedgerEvent.Body
    switch Int.random(in: 0..<7, using: &random) {
    case 0:
        body = .registered(
            token: token, platform: Bool.random(using: &random) ? text("iosandroidweb", 0...10) : nil,
            appID: Bool.random(using: &random) ? text("com.example.ÄÖ✓", 0...20) : nil)
    case 1: body = .unregistered(token: token, reason: text("uninstalled é\n\"", 0...30))
    case 2: body = .subscribed(token: token, topic: topic, via: via)
    case 3: body = .unsubscribed(token: token, topic: topic, via: via)
    case 4:
        let targets: [MessageTarget] = [
            .topic(topic), .condition("'\(topic.rawValue)' in topics || !('x' in topics)"), .token(token),
        ]
        body = .sent(
            SentMessage(
                messageID: UInt64.random(in: 1...UInt64(Int64.max), using: &random),
                target: targets.randomElement(using: &random)!,
                precedence: ConditionPrecedence.allCases.randomElement(using: &random)!,
                messageJSON: Array(#"{"data":{"k":"\#(text("xyz", 0...50))"}}"#.utf8)))
    case 5:
        body = .acknowledged(token: token, through: UInt64.random(in: 0...UInt64.max, using: &random))
    default:
        body = .audience(
            AudienceRecord(
                messageID: UInt64.random(in: 1...UInt64(Int64.max), using: &random),
                sendSeq: UInt64.random(in: 1...1_000_000, using: &random),
                recipientCount: UInt64.random(in: 0...1_000_000, using: &random),
                recipientDigest: (0..<32).map { _ in UInt8.random(in: 0...255, using: &random) }))
    }
    return LedgerEvent(
        seq: UInt64.random(in: 1...UInt64.max, using: &random),
        time: LedgerTime(microseconds: Int64.random(in: 0...4_000_000_000_000_000, using: &random)),
        actor: text("adminclientdevice", 0...12), requestID: text("0123456789abcdef-", 0...36), body: body)
}

@Suite("Event codec and hash chain")
struct EventCodecTests {
    @Test("every event kind round-trips through the codec")
    func roundTrip() async {
        await propertyCheck(count: 500, input: Gen.uint64()) { seed in
            let event = randomEvent(seed: seed)
            let encoded = EventCodec.encode(event)
            #expect(encoded.first == EventCodec.formatVersion)
            #expect((try? EventCodec.decode(encoded)) == event)
        }
    }

    @Test("the generator covers every kind")
    func generatorCoversKinds() {
        let kinds = Set((0..<200).map { randomEvent(seed: UInt64($0)).kind })
        #expect(kinds == Set(LedgerEvent.Kind.allCases))
    }

    @Test("an event of another encoding version fails with a clear message")
    func unsupportedVersion() {
        var encoded = EventCodec.encode(randomEvent(seed: 1))
        encoded[0] = 2
        #expect {
            try EventCodec.decode(encoded)
        } throws: { error in
            guard let error = error as? LedgerCoreError else { return false }
            return error.code == .unsupportedVersion && error.message.contains("version 2")
                && error.message.contains("reads version 1")
        }
    }

    @Test("garbage bytes are a corrupt event, not a crash")
    func garbage() {
        for bytes: [UInt8] in [[], [1], [1, 0xFF, 0xFF, 0xFF], [1, 0x52, 0x05, 0x01]] {
            #expect(throws: LedgerCoreError.self) { try EventCodec.decode(bytes) }
        }
    }

    @Test("hash = SHA-256(prevHash ‖ encoded event), checked against an independent SHA-256")
    func hashDefinition() {
        let encoded = Array("abc".utf8)
        let hash = encoded.withUnsafeBytes { HashChain.hash(previous: [UInt8](), encodedEvent: $0) }
        // FIPS 180-2 test vector for SHA-256("abc").
        #expect(hash.hexString == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        let chained = encoded.withUnsafeBytes { HashChain.hash(previous: HashChain.genesis, encodedEvent: $0) }
        #expect(chained != hash)
        #expect(chained.count == 32)
    }
}
