import Foundation
@testable import LedgerCore
import LedgerTestSupport
import PropertyBased
import Testing
import SwiftProtobuf

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
    // An ActivityKit token: held without an environment (pushed in its device's).
    func activityToken() -> APNsDeviceToken {
        let length = Int.random(in: APNsDeviceToken.byteRange, using: &random)
        return try! APNsDeviceToken(
            bytes: (0..<length).map { _ in UInt8.random(in: 0...255, using: &random) }, sandbox: false)
    }
    switch Int.random(in: 0..<18, using: &random) {
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
                messageJSON: Array(#"{"data":{"k":"\#(text("xyz", 0...50))"}}"#.utf8),
                broadcastChannelID: Bool.random(using: &random) ? text("ABCxyz019+/=", 1...24) : nil,
                topicActivity: [
                    nil, .followers, .nowhere, .pushToStart(attributesType: "M" + text("MatchAttributes_.", 0...40)),
                ].randomElement(using: &random)!))
    case 5:
        body = .acknowledged(token: token, through: UInt64.random(in: 0...UInt64.max, using: &random))
    case 6:
        let length = Int.random(in: APNsDeviceToken.byteRange, using: &random)
        body = .apnsTokenSet(
            token: token,
            apnsToken: try! APNsDeviceToken(
                bytes: (0..<length).map { _ in UInt8.random(in: 0...255, using: &random) },
                sandbox: Bool.random(using: &random)))
    case 7: body = .apnsTokenCleared(token: token, reason: text("BadDeviceToken é\n", 0...30))
    case 8:
        let failures = (0..<Int.random(in: 0...3, using: &random)).map { _ in
            PushFailure(
                token: try! RegistrationToken(text("abcXYZ019_:.-", 1...200)),
                kind: PushFailure.Kind.allCases.randomElement(using: &random)!,
                status: UInt16.random(in: 100...599, using: &random), reason: text("BadDeviceToken é", 0...20))
        }
        body = .pushProgress(
            PushProgress(
                sendSeq: UInt64.random(in: 1...UInt64.max, using: &random),
                throughToken: Bool.random(using: &random) ? token : nil, finished: Bool.random(using: &random),
                expired: Bool.random(using: &random), failures: failures,
                settledThrough: UInt64.random(in: 0...UInt64.max, using: &random),
                broadcast: Bool.random(using: &random)
                    ? BroadcastOutcome(
                        channelID: text("ABCxyz019+/=", 0...24), status: UInt16.random(in: 0...999, using: &random),
                        reason: text("BadExpirationDate é", 0...20), apnsRequestID: text("0123456789abcdef-", 0...36))
                    : nil))
    case 9:
        body = .erased(
            Erasure(
                pseudonym: try! RegistrationToken("erased-" + text("0123456789abcdef", 32...32)),
                registeredSeq: UInt64.random(in: 0...UInt64.max, using: &random),
                reason: text("GDPR Art. 17 é\n", 0...40),
                redactedEvents: UInt64.random(in: 0...UInt64.max, using: &random)))
    case 10:
        let first = UInt64.random(in: 1...1_000_000, using: &random)
        body = .retention(
            RetentionSweep(
                firstSeq: first, throughSeq: first + UInt64.random(in: 0...1_000_000, using: &random),
                cutoff: LedgerTime(microseconds: Int64.random(in: Int64.min...Int64.max, using: &random)),
                forgottenContents: UInt64.random(in: 0...UInt64.max, using: &random),
                unsealedContents: UInt64.random(in: 0...UInt64.max, using: &random)))
    case 16:
        body = .liveActivityChannelCreated(
            LiveActivityChannelChange(
                topic: topic, channelID: text("ABCxyz019+/=", 0...24),
                messageStoragePolicy: UInt32.random(in: 0...1, using: &random),
                apnsRequestID: text("0123456789abcdef-", 0...36)))
    case 17:
        body = .liveActivityChannelDeleted(
            LiveActivityChannelChange(
                topic: topic, channelID: text("ABCxyz019+/=", 0...24), apnsRequestID: text("0123456789abcdef-", 0...36),
                reason: text("deleted APNs: ChannelNotRegistered", 0...30)))
    case 12: body = .liveActivityFollowed(token: token, topic: topic, pushToken: activityToken())
    case 13: body = .liveActivityUnfollowed(token: token, topic: topic, reason: text("deleted by the device é", 0...30))
    case 14:
        body = .pushToStartTokenSet(
            token: token, attributesType: "M" + text("MatchAttributes_.", 0...40), pushToken: activityToken())
    case 15:
        body = .liveActivitiesEnded(
            topic: topic, sendSeq: UInt64.random(in: 1...UInt64.max, using: &random),
            messageID: UInt64.random(in: 1...UInt64(Int64.max), using: &random))
    default:
        body = .audience(
            AudienceRecord(
                messageID: UInt64.random(in: 1...UInt64(Int64.max), using: &random),
                sendSeq: UInt64.random(in: 1...1_000_000, using: &random),
                recipientCount: UInt64.random(in: 0...1_000_000, using: &random),
                recipientDigest: (0..<32).map { _ in UInt8.random(in: 0...255, using: &random) },
                digestVersion: Bool.random(using: &random) ? .devices : .tokens))
    }
    return LedgerEvent(
        seq: UInt64.random(in: 1...UInt64.max, using: &random),
        time: LedgerTime(microseconds: Int64.random(in: 0...4_000_000_000_000_000, using: &random)),
        actor: text("adminclientdevice", 0...12), requestID: text("0123456789abcdef-", 0...36), body: body)
}

@Suite("Event codec and hash chain", .offThePool)
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

    @Test("the canonical fast path decodes the common kinds and agrees with SwiftProtobuf on mutated bytes")
    func canonicalDecoderAgrees() async {
        await propertyCheck(count: 2000, input: Gen.uint64()) { seed in
            let event = randomEvent(seed: seed)
            var bytes = Array(EventCodec.encode(event).dropFirst())
            let common: Set<LedgerEvent.Kind> = [.registered, .unregistered, .subscribed, .unsubscribed, .acknowledged]
            let ascii = "\(event)".utf8.allSatisfy { $0 < 0x80 }
            if common.contains(event.kind) && ascii {
                // The fast path must take these, or it saves nothing.
                #expect(bytes.withUnsafeBytes { CanonicalEventDecoder.decode($0) } == event)
            }
            // Mutate: flip a byte, cut the tail, or insert a byte; both paths must still agree.
            var random = SeededGenerator(seed: seed ^ 0x5EED)
            for _ in 0..<Int.random(in: 1...3, using: &random) where !bytes.isEmpty {
                let index = Int.random(in: 0..<bytes.count, using: &random)
                switch Int.random(in: 0..<3, using: &random) {
                case 0: bytes[index] ^= UInt8.random(in: 1...255, using: &random)
                case 1: bytes.removeSubrange(index...)
                default: bytes.insert(UInt8.random(in: 0...255, using: &random), at: index)
                }
            }
            let fast = bytes.withUnsafeBytes { CanonicalEventDecoder.decode($0) }
            let reference = bytes.withUnsafeBytes { try? EventCodec.decodeWithSwiftProtobuf($0) }
            if let fast { #expect(fast == reference, "fast path accepted bytes SwiftProtobuf reads otherwise") }
            let full = try? EventCodec.decode([EventCodec.formatVersion] + bytes)
            #expect(full == reference)
        }
    }

    @Test("the canonical encoder writes SwiftProtobuf's bytes for every kind it takes")
    func canonicalEncoderAgrees() async {
        await propertyCheck(count: 2000, input: Gen.uint64()) { seed in
            let event = randomEvent(seed: seed)
            var fast: [UInt8] = [9]
            let taken = CanonicalEventEncoder.append(event, after: 7, to: &fast)
            let kinds: Set<LedgerEvent.Kind> = [.registered, .unregistered, .subscribed, .unsubscribed, .acknowledged]
            #expect(taken == kinds.contains(event.kind))
            #expect(fast == (taken ? [9, 7] + EventCodec.encodeWithSwiftProtobuf(event) : [9]))
        }
    }

    @Test(
        "the canonical encoder at the edges: defaults left out, optional fields kept when empty, long strings",
        arguments: {
            let token = RegistrationToken(trusted: "t")
            let topic = TopicName(trusted: "x")
            return [
                LedgerEvent.Body.registered(token: token, platform: "", appID: ""),
                .registered(token: token, platform: nil, appID: "a"),
                .registered(token: token, platform: "p", appID: nil),
                .unregistered(token: token, reason: ""), .acknowledged(token: token, through: 0),
                .acknowledged(token: token, through: .max), .subscribed(token: token, topic: topic, via: .client),
                .unsubscribed(
                    token: RegistrationToken(trusted: String(repeating: "k", count: 4096)), topic: topic, via: .v1),
            ]
        }())
    func canonicalEncoderEdges(_ body: LedgerEvent.Body) {
        for (seq, micros, actor) in [
            (UInt64(0), Int64(0), ""), (.max, -1, "a"), (1, .min, String(repeating: "é", count: 70)),
        ] {
            let event = LedgerEvent(
                seq: seq, time: LedgerTime(microseconds: micros), actor: actor, requestID: "", body: body)
            var fast: [UInt8] = []
            #expect(CanonicalEventEncoder.append(event, after: 1, to: &fast))
            #expect(fast == [1] + EventCodec.encodeWithSwiftProtobuf(event))
            #expect((try? EventCodec.decode(fast)) == event)
        }
    }

    @Test("edge encodings: the fast path defers or agrees with SwiftProtobuf", arguments: WireEdgeCase.all)
    func canonicalDecoderEdges(_ edge: WireEdgeCase) {
        let fast = edge.bytes.withUnsafeBytes { CanonicalEventDecoder.decode($0) }
        let reference = edge.bytes.withUnsafeBytes { try? EventCodec.decodeWithSwiftProtobuf($0) }
        if edge.fastPathTakes {
            #expect(fast != nil && fast == reference)
        } else {
            #expect(fast == nil, "the fast path should defer")
        }
        #expect((try? EventCodec.decode([EventCodec.formatVersion] + edge.bytes)) == reference)
    }

    @Test("the generator covers every kind")
    func generatorCoversKinds() {
        let kinds = Set((0..<200).map { randomEvent(seed: UInt64($0)).kind })
        #expect(kinds == Set(LedgerEvent.Kind.allCases))
    }

    @Test("an event of another encoding version fails with a clear message")
    func unsupportedVersion() throws {
        var encoded = EventCodec.encode(randomEvent(seed: 1))
        encoded[0] = 4
        #expect {
            try EventCodec.decode(encoded)
        } throws: { error in
            guard let error = error as? LedgerCoreError else { return false }
            return error.code == .unsupportedVersion && error.message.contains("version 4")
                && error.message.contains("reads versions 1, 2 and 3")
        }
        // Version 3 is sealed: a version-1 event relabelled has no seals for its sealed values, and is corrupt.
        encoded[0] = EventCodec.sealedVersion
        #expect(throws: LedgerCoreError.self) { try EventCodec.decode(encoded) }
        // Version 2 is version 1 rewritten by an erasure: the same encoding, read the same way.
        encoded[0] = EventCodec.redactedVersion
        #expect(try EventCodec.decode(encoded) == randomEvent(seed: 1))
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

    @Test("the appender's one-buffer record is hash ‖ encoded event, the hash chained on the previous one; reused")
    func recordInOneBuffer() throws {
        let event = LedgerEvent(
            seq: 7, time: LedgerTime(microseconds: 1_700_000_000_000_000), actor: "admin", requestID: "r",
            body: .subscribed(token: try RegistrationToken("tok-1"), topic: try TopicName("news"), via: .iid))
        let previous = (0..<32).map { UInt8($0 * 7 % 256) }
        let encoded = EventCodec.encode(event)
        let expectedHash = encoded.withUnsafeBytes { HashChain.hash(previous: previous, encodedEvent: $0) }
        var hash = previous
        var record: [UInt8] = [1, 2, 3]
        HashChain.appendRecord(of: event, chainingFrom: &hash, to: &record)
        #expect(hash == expectedHash)
        #expect(record == [1, 2, 3] + HashChain.record(hash: expectedHash, encodedEvent: encoded))
        let decoded = try record.dropFirst(3).withUnsafeBytes {
            try EventCodec.decode(try HashChain.split(record: $0).encodedEvent)
        }
        #expect(decoded == event)
        // Reused: emptied and filled again, the next event chains on the hash just written.
        record.removeAll(keepingCapacity: true)
        HashChain.appendRecord(of: event, chainingFrom: &hash, to: &record)
        #expect(hash == encoded.withUnsafeBytes { HashChain.hash(previous: expectedHash, encodedEvent: $0) })
        #expect(record == HashChain.record(hash: hash, encodedEvent: encoded))
    }
}

/// Hand-built protobuf encodings around the fast path's edges.
struct WireEdgeCase: CustomTestStringConvertible, Sendable {
    let name: String
    let bytes: [UInt8]
    let fastPathTakes: Bool
    var testDescription: String { name }

    static func varint(_ value: UInt64) -> [UInt8] {
        var value = value
        var bytes: [UInt8] = []
        while value >= 0x80 {
            bytes.append(UInt8(value & 0x7F) | 0x80)
            value >>= 7
        }
        return bytes + [UInt8(value)]
    }
    static func field(_ number: UInt64, varint value: UInt64) -> [UInt8] { varint(number << 3) + varint(value) }
    static func field(_ number: UInt64, bytes value: [UInt8]) -> [UInt8] {
        varint(number << 3 | 2) + varint(UInt64(value.count)) + value
    }
    static func field(_ number: UInt64, _ text: String) -> [UInt8] { field(number, bytes: Array(text.utf8)) }

    static let header =
        field(1, varint: 7) + field(2, varint: 1_700_000_000_000_000) + field(3, "admin")
        + field(4, "req-1")
    static func subscribed(via: [UInt8]) -> [UInt8] {
        header + field(12, bytes: field(1, "tok:APA91bX") + field(2, "news") + via)
    }

    static let all: [WireEdgeCase] = [
        .init(name: "canonical subscribed", bytes: subscribed(via: field(3, varint: 2)), fastPathTakes: true),
        .init(name: "via missing (unspecified)", bytes: subscribed(via: []), fastPathTakes: false),
        .init(name: "via 0 written out", bytes: subscribed(via: field(3, varint: 0)), fastPathTakes: false),
        .init(name: "via 4 (unknown)", bytes: subscribed(via: field(3, varint: 4)), fastPathTakes: false),
        .init(
            name: "via 2^32+1 (int32 truncation)", bytes: subscribed(via: field(3, varint: 1 << 32 | 1)),
            fastPathTakes: false),
        .init(
            name: "via twice", bytes: subscribed(via: field(3, varint: 1) + field(3, varint: 2)), fastPathTakes: false),
        .init(
            name: "unknown inner field", bytes: subscribed(via: field(3, varint: 1) + field(9, "x")),
            fastPathTakes: false),
        .init(
            name: "unknown outer field", bytes: subscribed(via: field(3, varint: 1)) + field(20, varint: 1),
            fastPathTakes: false),
        .init(
            name: "two bodies", bytes: subscribed(via: field(3, varint: 1)) + field(13, bytes: field(1, "t")),
            fastPathTakes: false),
        .init(
            name: "fields out of order",
            bytes: field(2, varint: 5) + field(1, varint: 7) + field(16, bytes: field(1, "t")),
            fastPathTakes: false),
        .init(
            name: "seq twice", bytes: field(1, varint: 7) + field(1, varint: 8) + field(16, bytes: field(1, "t")),
            fastPathTakes: false),
        .init(name: "no body", bytes: header, fastPathTakes: false),
        .init(
            name: "non-ASCII actor", bytes: field(3, "adminé") + field(16, bytes: field(1, "t")), fastPathTakes: false),
        .init(
            name: "invalid UTF-8 token", bytes: header + field(16, bytes: field(1, bytes: [0x74, 0xFF])),
            fastPathTakes: false),
        .init(name: "length past the end", bytes: header + [0x62, 0x7F, 0x0A], fastPathTakes: false),
        .init(name: "11-byte varint", bytes: [0x08] + Array(repeating: 0xFF, count: 10) + [0x01], fastPathTakes: false),
        .init(
            name: "registered with empty platform present",
            bytes: header + field(10, bytes: field(1, "t") + field(2, "")), fastPathTakes: true),
        .init(
            name: "acknowledged", bytes: header + field(16, bytes: field(1, "t") + field(2, varint: 99)),
            fastPathTakes: true),
        .init(
            name: "negative time", bytes: field(2, varint: UInt64(bitPattern: -5)) + field(11, bytes: field(1, "t")),
            fastPathTakes: true),
    ]
}

@Suite("APNs device tokens", .offThePool)
struct APNsDeviceTokenTests {
    @Test("hex of 32 to 400 digits, either case, is a token; odd, non-hex, short and long ones are refused")
    func parsing() throws {
        let token = try APNsDeviceToken(hex: String(repeating: "aB", count: 32), sandbox: true)
        #expect(token.bytes == [UInt8](repeating: 0xab, count: 32) && token.sandbox)
        #expect(token.hex == String(repeating: "ab", count: 32))
        #expect(try APNsDeviceToken(hex: String(repeating: "0", count: 32), sandbox: false).bytes.count == 16)
        #expect(try APNsDeviceToken(hex: String(repeating: "f", count: 400), sandbox: false).bytes.count == 200)
        for bad in [
            "", String(repeating: "0", count: 30), String(repeating: "0", count: 402),
            String(repeating: "0", count: 65),
            String(repeating: "g", count: 64), String(repeating: "0", count: 62) + " 0",
            "0x" + String(repeating: "0", count: 62),
        ] {
            #expect(throws: LedgerCoreError.self, "\(bad)") { try APNsDeviceToken(hex: bad, sandbox: false) }
        }
    }

    @Test("a stored push-to-start type that is not a type's name (300 bytes, a space) is a corrupt event, not a key")
    func corruptPushToStartType() throws {
        for name in [String(repeating: "T", count: 300), "Match Attributes", ""] {
            var message = Topicledger_V1_Event()
            message.seq = 1
            var body = Topicledger_V1_PushToStartTokenSet()
            body.token = "t"
            body.attributesType = name
            body.pushToken = Data(repeating: 1, count: 32)
            message.body = .pushToStartTokenSet(body)
            let bytes = [EventCodec.formatVersion] + (try message.serializedBytes() as [UInt8])
            #expect {
                try EventCodec.decode(bytes)
            } throws: { ($0 as? LedgerCoreError)?.code == .corruptEvent }
        }
    }

    @Test("a stored APNs token outside 16...200 bytes is a corrupt event, not a token")
    func corruptStoredToken() throws {
        var message = Topicledger_V1_Event()
        message.seq = 1
        var body = Topicledger_V1_ApnsTokenSet()
        body.token = "t"
        body.apnsToken = Data(repeating: 1, count: 15)
        message.body = .apnsTokenSet(body)
        let bytes = [EventCodec.formatVersion] + (try message.serializedBytes() as [UInt8])
        #expect {
            try EventCodec.decode(bytes)
        } throws: { ($0 as? LedgerCoreError)?.code == .corruptEvent }
    }

    @Test(
        "a stored topic_activity outside 0...3, a push-to-start without its type, or a type on another kind is a corrupt event",
        arguments: [
            (UInt32(4), ""), (UInt32.max, ""), (UInt32(2), ""), (UInt32(1), "MatchAttributes"),
            (UInt32(0), "MatchAttributes"), (UInt32(2), String(repeating: "M", count: 201)), (UInt32(2), ".Match"),
            (UInt32(2), "Match Attributes"),
        ] as [(UInt32, String)])
    func corruptTopicActivity(value: UInt32, attributesType: String) throws {
        var message = Topicledger_V1_Event()
        message.seq = 1
        var body = Topicledger_V1_Sent()
        body.messageID = 1
        body.targetKind = .targetTopic
        body.target = "scores"
        body.precedence = .standard
        body.topicActivity = value
        body.attributesType = attributesType
        message.body = .sent(body)
        let bytes = [EventCodec.formatVersion] + (try message.serializedBytes() as [UInt8])
        #expect {
            try EventCodec.decode(bytes)
        } throws: { ($0 as? LedgerCoreError)?.code == .corruptEvent }
        // In range, it reads back as written.
        body.topicActivity = 2
        body.attributesType = "MatchAttributes"
        message.body = .sent(body)
        let good = try EventCodec.decode([EventCodec.formatVersion] + (try message.serializedBytes() as [UInt8]))
        guard case .sent(let sent) = good.body else {
            Issue.record("not a sent event")
            return
        }
        #expect(sent.topicActivity == .pushToStart(attributesType: "MatchAttributes"))
    }

    @Test(
        "an audience written before digest versions reads as version 1 and re-encodes to its own bytes; an unknown version is a corrupt event"
    )
    func audienceDigestVersions() throws {
        var message = Topicledger_V1_Event()
        message.seq = 9
        var body = Topicledger_V1_Audience()
        body.messageID = 42
        body.sendSeq = 8
        body.recipientCount = 2
        body.recipientDigest = Data(repeating: 7, count: 32)
        message.body = .audience(body)
        let old = [EventCodec.formatVersion] + (try message.serializedBytes() as [UInt8])
        let decoded = try EventCodec.decode(old)
        guard case .audience(let record) = decoded.body else {
            Issue.record("decoded as \(decoded.kind)")
            return
        }
        #expect(record.digestVersion == .tokens)
        #expect(EventCodec.encode(decoded) == old, "the hash of an old record stays reproducible")
        var current = decoded
        current.body = .audience(
            AudienceRecord(messageID: 42, sendSeq: 8, recipientCount: 2, recipientDigest: record.recipientDigest))
        guard case .audience(let again) = try EventCodec.decode(EventCodec.encode(current)).body else { return }
        #expect(again.digestVersion == .devices)
        for stored: UInt32 in [3, 99, UInt32.max] {
            body.digestVersion = stored
            message.body = .audience(body)
            let bytes = [EventCodec.formatVersion] + (try message.serializedBytes() as [UInt8])
            #expect {
                try EventCodec.decode(bytes)
            } throws: { error in
                (error as? LedgerCoreError)?.code == .corruptEvent && "\(error)".contains("version \(stored)")
            }
        }
    }
}
