import Crypto
import Foundation
import LedgerTestSupport
import Testing

@testable import LedgerCore

/// Sealed fields (docs/event-format.md, "Sealed fields"): every identifier and content reaches the hash only as
/// `HMAC-SHA-256(key, value)`; forgetting replaces value and key with that commitment and keeps the hash.
@Suite(.offThePool) struct SealTests {
    static let token = RegistrationToken(trusted: "dT0k3n:APA91b" + String(repeating: "x", count: 40))
    static let apns = try! APNsDeviceToken(bytes: Array(repeating: 0xC4, count: 32), sandbox: false)

    static func sealed(_ body: LedgerEvent.Body, seq: UInt64 = 7) -> LedgerEvent {
        let seals = EventSealer.seals(for: body, seq: seq)
        return LedgerEvent(
            seq: seq, time: LedgerTime(microseconds: 1_765_000_000_000_000), actor: "device", requestID: "r1",
            body: body, seals: seals)
    }

    /// The commitment written out (``Seal/commitment(key:value:)``) is swift-crypto's HMAC, for keys up to a block
    /// and past it, and values of every length around SHA-256's block.
    @Test func commitmentIsHMAC() {
        for keySize in [0, 1, 32, 63, 64, 65, 100] {
            let key = (0..<keySize).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            for valueSize in [0, 1, 55, 56, 63, 64, 65, 119, 120, 200, 1000] {
                let value = (0..<valueSize).map { UInt8(truncatingIfNeeded: $0 &* 101 &+ keySize) }
                let expected = Array(HMAC<SHA256>.authenticationCode(for: value, using: SymmetricKey(data: key)))
                #expect(Seal.commitment(key: key, value: value) == expected, "key \(keySize) B, value \(valueSize) B")
                #expect(Seal.commitment(key: key, value: value.lazy.map { $0 }) == expected)
            }
        }
    }

    static var bodies: [LedgerEvent.Body] {
        let other = RegistrationToken(trusted: "other-token-" + String(repeating: "y", count: 30))
        return [
            .registered(token: token, platform: "ios", appID: "com.example"),
            .unregistered(token: token, reason: "deleted"),
            .subscribed(token: token, topic: TopicName(trusted: "news"), via: .client),
            .unsubscribed(token: token, topic: TopicName(trusted: "news"), via: .v1),
            .acknowledged(token: token, through: 5),
            .apnsTokenSet(token: token, apnsToken: apns),
            .apnsTokenCleared(token: token, reason: "deleted by the device"),
            .sent(
                SentMessage(
                    messageID: 9, target: .token(token), precedence: .leftToRight,
                    messageJSON: Array(#"{"token":"\#(token.rawValue)","data":{"a":"b"}}"#.utf8))),
            .sent(
                SentMessage(
                    messageID: 10, target: .topic(TopicName(trusted: "news")), precedence: .standard,
                    messageJSON: Array(#"{"topic":"news","notification":{"title":"Anna"}}"#.utf8))),
            .pushProgress(
                PushProgress(
                    sendSeq: 3, throughToken: token, finished: false, expired: false,
                    failures: [PushFailure(token: other, kind: .unregistered, status: 410, reason: "Unregistered")],
                    settledThrough: 0)),
            .audience(AudienceRecord(messageID: 9, sendSeq: 3, recipientCount: 1, recipientDigest: Array(repeating: 1, count: 32))),
            // A topic's broadcast, and its channel's changes: nothing sealed (a channel id names no device).
            .pushProgress(
                PushProgress(
                    sendSeq: 10, throughToken: nil, finished: true, settledThrough: 10,
                    broadcast: BroadcastOutcome(channelID: "dGVzdA==", status: 200, apnsRequestID: "r-1"))),
            .liveActivityChannelCreated(
                LiveActivityChannelChange(
                    topic: TopicName(trusted: "news"), channelID: "dGVzdA==", messageStoragePolicy: 1,
                    apnsRequestID: "r-0")),
            .liveActivityChannelDeleted(
                LiveActivityChannelChange(
                    topic: TopicName(trusted: "news"), channelID: "dGVzdA==", apnsRequestID: "r-2", reason: "deleted")),
            // A send recorded on the topic's channel: the channel id is not sealed, the content is.
            .sent(
                SentMessage(
                    messageID: 11, target: .topic(TopicName(trusted: "news")), precedence: .standard,
                    messageJSON: Array(#"{"topic":"news","apns":{"headers":{"apns-push-type":"liveactivity"}}}"#.utf8),
                    broadcastChannelID: "dGVzdA==", topicActivity: .followers)),
            .sent(
                SentMessage(
                    messageID: 12, target: .topic(TopicName(trusted: "news")), precedence: .standard,
                    messageJSON: Array(#"{"topic":"news"}"#.utf8),
                    topicActivity: .pushToStart(attributesType: "MatchAttributes"))),
            // A topic's Live Activity followers: the token and the ActivityKit token sealed as an APNs token's.
            .liveActivityFollowed(token: token, topic: TopicName(trusted: "news"), pushToken: apns),
            .liveActivityUnfollowed(token: token, topic: TopicName(trusted: "news"), reason: "deleted by the device"),
            .pushToStartTokenSet(token: token, attributesType: "MatchAttributes", pushToken: apns),
            .liveActivitiesEnded(topic: TopicName(trusted: "news"), sendSeq: 11, messageID: 11),
        ]
    }

    @Test func sealedEventsRoundTripWithTheirSeals() throws {
        for body in Self.bodies {
            let event = Self.sealed(body)
            let encoded = EventCodec.encode(event)
            #expect(encoded[0] == EventCodec.sealedVersion)
            let decoded = try EventCodec.decode(encoded)
            #expect(decoded == event)
            #expect(decoded.seals == event.seals, "\(event.kind)")
            #expect(decoded.seals?.count == body.sealedValues.count)
            // The hand decoder and SwiftProtobuf's path agree on the seals.
            let viaProtobuf = try encoded.withUnsafeBytes {
                try EventCodec.decodeWithSwiftProtobuf(UnsafeRawBufferPointer(rebasing: $0.dropFirst()))
            }
            #expect(viaProtobuf == event)
        }
    }

    @Test func theHashedFormHoldsCommitmentsAndNoValueOrKey() throws {
        for body in Self.bodies {
            let event = Self.sealed(body)
            var form: [UInt8] = []
            #expect(EventCodec.appendHashedForm(of: event, to: &form))
            #expect(form[0] == EventCodec.sealedVersion)
            for (value, seal) in zip(body.sealedValues, event.seals ?? []) {
                let key = try #require(seal.key)
                #expect(!ByteSearch.contains(form, key), "the key is not hashed")
                #expect(!ByteSearch.contains(form, value.bytes), "\(event.kind): the value is not hashed")
                let commitment = Array(HMAC<SHA256>.authenticationCode(for: value.bytes, using: SymmetricKey(data: key)))
                let expected: [UInt8] =
                    if case .token = value { Array(Hex.encode(commitment).utf8) } else { commitment }
                #expect(ByteSearch.contains(form, expected), "\(event.kind): the commitment is hashed")
            }
        }
    }

    @Test func forgettingKeepsTheHashAndLeavesNothingToTest() throws {
        let pseudonym = RegistrationToken(trusted: "erased-" + String(repeating: "a", count: 32))
        for body in Self.bodies where body.sealedValueCount > 0 {
            let event = Self.sealed(body)
            var record: [UInt8] = []
            var hash = HashChain.genesis
            HashChain.appendRecord(of: event, chainingFrom: &hash, to: &record)
            // What an erasure leaves: every token the pseudonym, every APNs token zeros, the content gone.
            var rewritten = event
            rewritten.body = body.replacingSealedValues { _, value in
                switch value {
                case .token: .token(pseudonym)
                case .apnsToken(let token): .apnsToken(try! APNsDeviceToken(bytes: Array(repeating: 0, count: token.bytes.count), sandbox: token.sandbox))
                case .content: .content([])
                }
            }
            rewritten.seals = event.seals(forgettingChangesIn: rewritten.body, reason: Seal.erasure)
            #expect(rewritten.seals?.allSatisfy { $0.isForgotten && $0.forgotten == Seal.erasure } == true)
            let stored = EventCodec.encode(rewritten)
            for value in body.sealedValues { #expect(!ByteSearch.contains(stored, value.bytes)) }
            for seal in event.seals ?? [] { #expect(!ByteSearch.contains(stored, seal.key ?? [])) }
            let recomputed = try stored.withUnsafeBytes {
                try HashChain.recomputedHash(previous: HashChain.genesis, encodedEvent: $0)
            }
            #expect(recomputed == Array(record.prefix(32)), "\(event.kind): the forgotten record proves its hash")
            // The token's holder rebuilds the event with it, plain: no hash matches.
            var guess = event
            guess.seals = nil
            let plain = EventCodec.encode(guess)
            #expect(plain.withUnsafeBytes { HashChain.hash(previous: HashChain.genesis, encodedEvent: $0) } != recomputed)
        }
    }

    @Test func changingASealedValueChangesTheHash() throws {
        let event = Self.sealed(.subscribed(token: Self.token, topic: TopicName(trusted: "news"), via: .client))
        let encoded = EventCodec.encode(event)
        let hash = try encoded.withUnsafeBytes { try HashChain.recomputedHash(previous: HashChain.genesis, encodedEvent: $0) }
        var other = event
        other.body = .subscribed(token: RegistrationToken(trusted: "another"), topic: TopicName(trusted: "news"), via: .client)
        let otherHash = try EventCodec.encode(other).withUnsafeBytes {
            try HashChain.recomputedHash(previous: HashChain.genesis, encodedEvent: $0)
        }
        #expect(hash != otherHash)
        var rekeyed = event
        rekeyed.seals = [Seal(key: Seal.newKey())]
        let rekeyedHash = try EventCodec.encode(rekeyed).withUnsafeBytes {
            try HashChain.recomputedHash(previous: HashChain.genesis, encodedEvent: $0)
        }
        #expect(hash != rekeyedHash)
    }

    @Test func badSealsAreRefusedNotTrapped() throws {
        let event = Self.sealed(.subscribed(token: Self.token, topic: TopicName(trusted: "news"), via: .client))
        var tooMany = event
        tooMany.seals = [Seal(key: Seal.newKey()), Seal(key: Seal.newKey())]
        #expect(throws: LedgerCoreError.self) { try EventCodec.decode(EventCodec.encode(tooMany)) }
        var shortKey = EventCodec.encode(event)
        // The seal's key length byte (after the tag F2 01, the seal's length and 0A): 32 → 31.
        let at = try #require(shortKey.firstRange(of: [0xF2, 0x01])).lowerBound
        shortKey[at + 4] = 31
        shortKey[at + 2] -= 1
        shortKey.remove(at: at + 5)
        #expect(throws: LedgerCoreError.self) { try EventCodec.decode(shortKey) }
    }

    @Test func everySealedValueHasAKeyOfItsOwn() throws {
        let apnsSet = EventSealer.seals(for: .apnsTokenSet(token: Self.token, apnsToken: Self.apns), seq: 1)
        let subscribe = EventSealer.seals(
            for: .subscribed(token: Self.token, topic: TopicName(trusted: "t"), via: .client), seq: 2)
        let keys = (apnsSet + subscribe).compactMap(\.key)
        #expect(keys.count == 3 && Set(keys).count == 3, "no key is shared, not even by one device's values")
        // So a device's token commits differently in each record: one record's key opens no other.
        let token = Array(Self.token.rawValue.utf8)
        #expect(Seal.commitment(key: keys[0], value: token) != Seal.commitment(key: keys[2], value: token))
        // A seeded source gives the same keys for the same places, whatever the order they are asked in.
        let seeded = SealKeySource(seed: 3)
        #expect(seeded.newKey(seq: 9, index: 1) == SealKeySource(seed: 3).newKey(seq: 9, index: 1))
        #expect(seeded.newKey(seq: 9, index: 1) != seeded.newKey(seq: 9, index: 0))
    }
}

/// ``SealedTokenForm`` (the appender's and `verify`'s patch over the stored bytes) hashes what the general path
/// (``EventCodec/appendHashedForm(of:to:)``) hashes, for every kind it takes, held and forgotten, with bodies whose
/// length needs one, two and three varint bytes before and after the patch; and it leaves every other kind alone.
@Suite(.offThePool) struct SealedTokenFormTests {
    static func viaGeneralPath(_ event: LedgerEvent) -> [UInt8]? {
        var form: [UInt8] = []
        guard EventCodec.appendHashedForm(of: event, to: &form) else { return nil }
        var hasher = SHA256()
        hasher.update(data: HashChain.genesis)
        hasher.update(data: form)
        return Array(hasher.finalize())
    }

    static func viaPatch(_ event: LedgerEvent) -> [UInt8]? {
        var hasher = SHA256()
        hasher.update(data: HashChain.genesis)
        let taken = EventCodec.encode(event).withUnsafeBytes {
            SealedTokenForm.update(&hasher, encoded: $0, seals: event.seals ?? [])
        }
        return taken ? Array(hasher.finalize()) : nil
    }

    @Test func thePatchHashesWhatTheGeneralPathHashes() throws {
        let pseudonym = RegistrationToken(trusted: "erased-" + String(repeating: "c", count: 32))
        var taken = 0
        for tokenLength in [1, 40, 63, 64, 65, 120, 200, 300] {
            let token = RegistrationToken(trusted: String(repeating: "t", count: tokenLength))
            for topicLength in [1, 60, 130, 900, 17_000] {
                let topic = TopicName(trusted: String(repeating: "n", count: topicLength))
                let bodies: [LedgerEvent.Body] = [
                    .registered(token: token, platform: "ios", appID: String(repeating: "a", count: topicLength)),
                    .registered(token: token, platform: nil, appID: nil),
                    .unregistered(token: token, reason: String(repeating: "r", count: topicLength)),
                    .unregistered(token: token, reason: ""),
                    .subscribed(token: token, topic: topic, via: .iid),
                    .unsubscribed(token: token, topic: topic, via: .v1),
                    .acknowledged(token: token, through: UInt64(topicLength) << 40),
                    .acknowledged(token: token, through: 0),
                    .apnsTokenCleared(token: token, reason: String(repeating: "c", count: topicLength)),
                ]
                for body in bodies {
                    for forget in [false, true] {
                        var event = SealTests.sealed(body, seq: UInt64(tokenLength * 1000 + topicLength))
                        if forget {
                            let rewritten = body.replacingSealedValues { _, _ in .token(pseudonym) }
                            event.seals = event.seals(forgettingChangesIn: rewritten, reason: Seal.erasure)
                            event.body = rewritten
                        }
                        let patched = try #require(Self.viaPatch(event), "\(event.kind) takes the patch")
                        #expect(patched == Self.viaGeneralPath(event), "\(event.kind), token \(tokenLength), \(topicLength)")
                        taken += 1
                    }
                }
            }
        }
        #expect(taken == 8 * 5 * 9 * 2)
        // The kinds with other sealed values, or none, take the general path.
        for body in SealTests.bodies {
            let event = SealTests.sealed(body)
            switch body {
            case .apnsTokenSet, .sent, .pushProgress, .audience, .liveActivityChannelCreated,
                .liveActivityChannelDeleted, .liveActivityFollowed, .pushToStartTokenSet, .liveActivitiesEnded:
                #expect(Self.viaPatch(event) == nil, "\(event.kind)")
            default: #expect(Self.viaPatch(event) == Self.viaGeneralPath(event), "\(event.kind)")
            }
        }
        // Seals that do not match (two for a one-token kind) are left to the general path, which refuses them.
        var mismatched = SealTests.sealed(.subscribed(token: SealTests.token, topic: TopicName(trusted: "n"), via: .client))
        mismatched.seals = [Seal(key: Seal.newKey()), Seal(key: Seal.newKey())]
        #expect(Self.viaPatch(mismatched) == nil)
        #expect(Self.viaGeneralPath(mismatched) == nil)
    }
}

/// tools/merkle/sealed_form.py, written from docs/event-format.md alone, gives the hash Swift gives for every kind
/// of sealed event, held or forgotten.
@Suite(.offThePool) struct SealedFormScriptTests {
    @Test func thePythonScriptReproducesEveryHash() throws {
        var lines: [String] = []
        var previous = HashChain.genesis
        for (index, body) in SealTests.bodies.enumerated() {
            for forget in [false, true] {
                var event = SealTests.sealed(body, seq: UInt64(index + 1))
                if forget {
                    event.seals = event.seals(
                        forgettingChangesIn: body.replacingSealedValues { _, value in
                            switch value {
                            case .token: .token(RegistrationToken(trusted: "erased-" + String(repeating: "b", count: 32)))
                            case .apnsToken: .apnsToken(try! APNsDeviceToken(bytes: Array(repeating: 0, count: 32), sandbox: false))
                            case .content: .content([])
                            }
                        }, reason: Seal.erasure)
                }
                var record: [UInt8] = []
                let before = previous
                HashChain.appendRecord(of: event, chainingFrom: &previous, to: &record)
                lines.append("\(Hex.encode(before)) \(Hex.encode(Array(record.dropFirst(32)))) \(Hex.encode(previous))")
            }
        }
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("tools/merkle/sealed_form.py").path
        let driver = """
            import sys, importlib.util
            spec = importlib.util.spec_from_file_location("sealed_form", sys.argv[1])
            sealed_form = importlib.util.module_from_spec(spec); spec.loader.exec_module(sealed_form)
            for line in sys.stdin:
                previous, encoded, expected = line.split()
                got = sealed_form.record_hash(bytes.fromhex(previous), bytes.fromhex(encoded)).hex()
                print("ok" if got == expected else "MISMATCH " + line)
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", driver, script]
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        input.fileHandleForWriting.write(Data((lines.joined(separator: "\n") + "\n").utf8))
        try input.fileHandleForWriting.close()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        let answers = text.split(separator: "\n")
        #expect(answers.count == lines.count)
        #expect(answers.allSatisfy { $0 == "ok" }, "\(text)")
    }
}

/// A forged sealed record — bytes a protobuf reader would decode to something other than what the hash binds, such as
/// a sealed field written twice (a reader keeps the last copy) — is refused alike by Swift
/// (``HashChain/recomputedHash(previous:encodedEvent:decoded:)``, which requires the canonical encoding) and by
/// tools/merkle/sealed_form.py (and so verify_proof.py); both still take every canonical record, with the same hash.
@Suite(.offThePool) struct SealedFormForgeryTests {
    typealias Field = (number: UInt64, bytes: [UInt8], payload: [UInt8])

    func varint(_ value: UInt64) -> [UInt8] {
        var value = value
        var out: [UInt8] = []
        while value >= 0x80 {
            out.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        return out + [UInt8(value)]
    }

    func field(_ number: UInt64, _ payload: [UInt8]) -> [UInt8] {
        varint(number << 3 | 2) + varint(UInt64(payload.count)) + payload
    }

    func field(_ number: UInt64, varint value: UInt64) -> [UInt8] { varint(number << 3) + varint(value) }

    /// The fields of a message in wire order: each one's number, its bytes (key included), and a length-delimited
    /// one's contents.
    func fields(_ bytes: [UInt8]) -> [Field] {
        var out: [Field] = []
        var offset = 0
        func read() -> UInt64 {
            var value: UInt64 = 0
            var shift: UInt64 = 0
            while true {
                let byte = bytes[offset]
                offset += 1
                value |= UInt64(byte & 0x7F) << shift
                if byte < 0x80 { return value }
                shift += 7
            }
        }
        while offset < bytes.count {
            let start = offset
            let key = read()
            var payload: [UInt8] = []
            if key & 7 == 0 {
                _ = read()
            } else {
                let length = Int(read())
                payload = Array(bytes[offset..<offset + length])
                offset += length
            }
            out.append((key >> 3, Array(bytes[start..<offset]), payload))
        }
        return out
    }

    /// The record of `event` with its body's fields rewritten by `body`, then the event's by `top`.
    func record(
        _ event: LedgerEvent, top: ([Field]) -> [[UInt8]] = { $0.map(\.bytes) },
        body: ([Field]) -> [[UInt8]] = { $0.map(\.bytes) }
    ) -> [UInt8] {
        let encoded = EventCodec.encode(event)
        let rebuilt = fields(Array(encoded.dropFirst())).map { entry -> Field in
            guard (10..<30).contains(entry.number) else { return entry }
            let payload = Array(body(fields(entry.payload)).joined())
            return (entry.number, field(entry.number, payload), payload)
        }
        return [encoded[0]] + Array(top(rebuilt).joined())
    }

    @Test func forgedRecordsAreRefusedByBothAndCanonicalOnesTakenByBoth() throws {
        let token = SealTests.token
        let other = Array("other-token-forged".utf8)
        let news = TopicName(trusted: "news")
        let subscribed = SealTests.sealed(.subscribed(token: token, topic: news, via: .client), seq: 3)
        let sentToTopic = SealTests.sealed(
            .sent(
                SentMessage(
                    messageID: 10, target: .topic(news), precedence: .standard,
                    messageJSON: Array(#"{"notification":{"title":"NEGATIVE"}}"#.utf8))), seq: 4)
        let progress = SealTests.sealed(
            .pushProgress(
                PushProgress(
                    sendSeq: 3, throughToken: token, finished: false, expired: false,
                    failures: [PushFailure(token: token, kind: .unregistered, status: 410, reason: "Unregistered")],
                    settledThrough: 0)), seq: 5)
        var forgotten = subscribed
        forgotten.seals = [Seal(commitment: Array(repeating: 7, count: 32), forgotten: "")]
        let forged: [(String, [UInt8])] = [
            ("a second token in subscribed, next to the first",
             record(subscribed, body: { [$0[0].bytes, field(1, other)] + $0.dropFirst().map(\.bytes) })),
            ("a second token in subscribed, last", record(subscribed, body: { $0.map(\.bytes) + [field(1, other)] })),
            ("a second message_json in sent",
             record(sentToTopic, body: { $0.map(\.bytes) + [field(5, Array(#"{"notification":{"title":"POSITIVE"}}"#.utf8))] })),
            ("a second token in a push_progress failure",
             record(progress, body: {
                 $0.map { entry in
                     guard entry.number == 5 else { return entry.bytes }
                     return field(5, Array(fields(entry.payload).map { $0.number == 1 ? $0.bytes + field(1, other) : $0.bytes }.joined()))
                 }
             })),
            ("a second through_token in push_progress",
             record(progress, body: { $0.flatMap { $0.number == 2 ? [$0.bytes, field(2, other)] : [$0.bytes] } })),
            ("a second actor", record(subscribed, top: { $0.flatMap { $0.number == 3 ? [$0.bytes, field(3, Array("admin".utf8))] : [$0.bytes] } })),
            ("a second seq", record(subscribed, top: { $0.flatMap { $0.number == 1 ? [$0.bytes, field(1, varint: 4)] : [$0.bytes] } })),
            ("a second body", record(subscribed, top: { $0.flatMap { $0.number == 12 ? [$0.bytes, field(13, $0.payload)] : [$0.bytes] } })),
            ("the request id before the actor", record(subscribed, top: { var out = $0.map(\.bytes); out.swapAt(2, 3); return out })),
            ("the topic before the token", record(subscribed, body: { var out = $0.map(\.bytes); out.swapAt(0, 1); return out })),
            ("the seals before the body", record(subscribed, top: { var out = $0.map(\.bytes); out.swapAt(4, 5); return out })),
            ("an explicit empty reason",
             record(SealTests.sealed(.unregistered(token: token, reason: ""), seq: 6), body: { $0.map(\.bytes) + [field(2, [])] })),
            ("an explicit zero through_seq",
             record(SealTests.sealed(.acknowledged(token: token, through: 0), seq: 6), body: { $0.map(\.bytes) + [field(2, varint: 0)] })),
            ("an explicit empty request id",
             record(subscribed, top: { $0.flatMap { $0.number == 4 ? [field(4, [])] : [$0.bytes] } })),
            ("an explicit empty forgotten in a seal",
             record(forgotten, top: { $0.map { $0.number == 30 ? field(30, $0.payload + field(3, [])) : $0.bytes } })),
            ("a seal's key twice", record(subscribed, top: { $0.map { $0.number == 30 ? field(30, $0.payload + $0.payload) : $0.bytes } })),
            ("an unknown field in the body", record(subscribed, body: { $0.map(\.bytes) + [field(9, [1])] })),
            ("an unknown field in the event", record(subscribed, top: { $0.flatMap { $0.number == 4 ? [$0.bytes, field(5, [1])] : [$0.bytes] } })),
            ("an unknown field in a failure",
             record(progress, body: { $0.map { $0.number == 5 ? field(5, $0.payload + field(7, [1])) : $0.bytes } })),
            ("an unknown via", record(subscribed, body: { $0.map { $0.number == 3 ? field(3, varint: 7) : $0.bytes } })),
            ("no via (0: none Swift reads)", record(subscribed, body: { $0.filter { $0.number != 3 }.map(\.bytes) })),
            ("a non-minimal varint (seq 3 in two bytes)", record(subscribed, top: { [[0x08, 0x83, 0x00]] + $0.dropFirst().map(\.bytes) })),
            ("a non-minimal length (the body's)",
             record(subscribed, top: {
                 $0.map { $0.number == 12 ? [0x62, UInt8($0.payload.count) | 0x80, 0x00] + $0.payload : $0.bytes }
             })),
        ]
        var canonical = (SealTests.bodies + [
            .registered(token: token, platform: "", appID: ""),  // `optional`: written when set, even empty
            .registered(token: token, platform: nil, appID: nil),
            .unregistered(token: token, reason: ""),
            .acknowledged(token: token, through: 0),
        ]).enumerated().map { SealTests.sealed($0.element, seq: UInt64($0.offset + 1)) }
        canonical.append(forgotten)
        let records = forged.map(\.1) + canonical.map { EventCodec.encode($0) }

        // Swift: every forgery throws; every canonical record hashes.
        var swiftHashes: [String] = []
        for (index, bytes) in records.enumerated() {
            let hash = try? bytes.withUnsafeBytes { try HashChain.recomputedHash(previous: HashChain.genesis, encodedEvent: $0) }
            if index < forged.count {
                #expect(hash == nil, "Swift takes \(forged[index].0)")
            } else {
                #expect(hash != nil, "Swift refuses canonical record \(index - forged.count)")
            }
            swiftHashes.append(hash.map { Hex.encode($0) } ?? "refused")
        }

        // The script: the same answers, and the same hashes.
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("tools/merkle/sealed_form.py").path
        let driver = """
            import sys, importlib.util
            spec = importlib.util.spec_from_file_location("sealed_form", sys.argv[1])
            sealed_form = importlib.util.module_from_spec(spec); spec.loader.exec_module(sealed_form)
            for line in sys.stdin:
                try:
                    print(sealed_form.record_hash(bytes(32), bytes.fromhex(line.strip())).hex())
                except sealed_form.Malformed:
                    print("refused")
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", driver, script]
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        input.fileHandleForWriting.write(Data((records.map { Hex.encode($0) }.joined(separator: "\n") + "\n").utf8))
        try input.fileHandleForWriting.close()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        let answers = text.split(separator: "\n").map(String.init)
        #expect(answers.count == records.count, "\(text)")
        for (index, answer) in answers.enumerated() where index < records.count {
            let name = index < forged.count ? forged[index].0 : "canonical record \(index - forged.count)"
            #expect(answer == swiftHashes[index], "\(name): the script says \(answer), Swift \(swiftHashes[index])")
            if index >= forged.count { #expect(answer != "refused", "the script refuses \(name)") }
        }
    }
}

/// The worked example of docs/event-format.md ("Sealed fields"), byte for byte: if the encoding or the hashed form
/// changes, this fails and the page must change with it.
@Suite(.offThePool) struct SealedWorkedExampleTests {
    @Test func theDocumentedExampleIsWhatTheCodeWrites() throws {
        let token = RegistrationToken(trusted: "dGVzdA:APA91b-example")
        let event = LedgerEvent(
            seq: 3, time: LedgerTime(microseconds: 1_765_000_000_000_000), actor: "device", requestID: "r-1",
            body: .subscribed(token: token, topic: TopicName(trusted: "news"), via: .client),
            seals: [Seal(key: Array(0..<32))])
        #expect(
            Hex.encode(EventCodec.encode(event))
                == "0308031080a09db0a1a891031a066465766963652203722d31621f0a156447567a64413a4150413931622d6578616d706c65"
                + "12046e6577731801f201220a20000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")
        #expect(
            Hex.encode(Seal.commitment(key: Array(0..<32), value: Array(token.rawValue.utf8)))
                == "4020d6e1b34e4267d409fbf14b6bd67be178654244cb7e67227f51c474ce679c")
        var form: [UInt8] = []
        #expect(EventCodec.appendHashedForm(of: event, to: &form))
        #expect(
            Hex.encode(form)
                == "0308031080a09db0a1a891031a066465766963652203722d31624a0a4034303230643665316233346534323637643430"
                + "396662663134623662643637626531373836353432343463623765363732323766353163343734636536373963120"
                + "46e6577731801")
        var record: [UInt8] = []
        var hash = HashChain.genesis
        HashChain.appendRecord(of: event, chainingFrom: &hash, to: &record)
        #expect(Hex.encode(hash) == "67a9a058f18f4b4f99a87aaf450fe6dc5d3812df9c61ca1a1226728784586aa6")
    }
}
