// What the fuzz targets of tools/fuzz check of each input, as functions that throw instead of trapping: the
// libFuzzer programs (tools/fuzz/*Fuzzer, built by tools/fuzz/run.sh) turn a failure into a crash libFuzzer
// records, and FuzzHarnessTests runs the same checks on the seed corpora and on mutations of them in `make test`,
// in the one build every other test uses.

import Foundation
import FCMWire
import LedgerCore

/// A property a fuzz target checks did not hold for an input.
public struct FuzzFailure: Error, CustomStringConvertible {
    public let description: String

    init(_ description: String) { self.description = description }
}

/// The checks of the condition parser, the stored-event decoder and request bodies.
public enum FuzzHarness {
    /// The small universe each parsed condition is evaluated over: instance i holds the topics whose bit is set.
    static let names = ["A", "B", "C", "D", "E"].map { try! TopicName($0) }

    /// The condition parser: parsing never crashes; whatever parses prints to canonical text that parses back to
    /// the same tree under the same rule; and set-algebra evaluation agrees with brute force on a small universe.
    public static func checkCondition(_ bytes: UnsafeRawBufferPointer) throws {
        let text = String(decoding: bytes, as: UTF8.self)
        for rule in ConditionPrecedence.allCases {
            guard let condition = try? Condition(parsing: text, precedence: rule) else { continue }
            let canonical = condition.text(precedence: rule)
            guard let reparsed = try? Condition(parsing: canonical, precedence: rule), reparsed == condition else {
                throw FuzzFailure("canonical text does not round-trip: \(canonical)")
            }
            let capacity = 1 << names.count
            var universe = InstanceSet(capacity: capacity)
            for id in 0..<capacity { universe.insert(InstanceID(id)) }
            let audience = condition.audience(universe: universe) { name in
                var members = InstanceSet(capacity: capacity)
                if let bit = names.firstIndex(of: name) {
                    for id in 0..<capacity where id & (1 << bit) != 0 { members.insert(InstanceID(id)) }
                }
                return members
            }
            for id in 0..<capacity {
                let held = Set(names.indices.filter { id & (1 << $0) != 0 }.map { names[$0] })
                if audience.contains(InstanceID(id)) != condition.isSatisfied(byTopics: held) {
                    throw FuzzFailure("set algebra and brute force disagree on \(canonical) for instance \(id)")
                }
            }
        }
    }

    /// The stored-event decoder: whatever bytes a log record holds — a damaged disk, a hand-edited copy, a future
    /// version — reading them never traps. Decoding answers an event or an error; the hand-written canonical
    /// decoder, when it answers, agrees with SwiftProtobuf's; a decoded event renders as a `ledger log` line and
    /// encodes to bytes that decode to the same event with the same seals; its hash recomputes (or is refused)
    /// without trapping.
    public static func checkEvent(_ bytes: UnsafeRawBufferPointer) throws {
        if bytes.count > 1 {
            let body = UnsafeRawBufferPointer(rebasing: bytes.dropFirst())
            if let fast = CanonicalEventDecoder.decode(body) {
                guard let reference = try? EventCodec.decodeWithSwiftProtobuf(body), reference == fast else {
                    throw FuzzFailure("the canonical decoder and SwiftProtobuf disagree")
                }
            }
        }
        guard let event = try? EventCodec.decode(bytes) else { return }
        _ = EventJSON.line(event, prevHash: [UInt8](repeating: 0, count: 32), hash: [UInt8](repeating: 1, count: 32))
        guard let again = try? EventCodec.decode(EventCodec.encode(event)), again == event, again.seals == event.seals
        else {
            throw FuzzFailure("a decoded event does not survive encode → decode")
        }
        _ = try? HashChain.recomputedHash(
            previous: [UInt8](repeating: 0, count: 32), encodedEvent: bytes, decoded: event)
    }

    /// One encoded event of each kind, plain and sealed (one value forgotten): the event checks' starting corpus.
    public static func eventSeeds() -> [[UInt8]] {
        var seeds: [[UInt8]] = []
        let token = try! RegistrationToken("cVsq3Z7cQ1GeEk1r0AGqjv:APA91bH-seed")
        let topic = try! TopicName("weather")
        let bodies: [LedgerEvent.Body] = [
            .registered(token: token, platform: "ios", appID: "com.example"),
            .subscribed(token: token, topic: topic, via: .iid),
            .unsubscribed(token: token, topic: topic, via: .client),
            .unregistered(token: token, reason: "uninstalled"),
            .sent(
                SentMessage(
                    messageID: 42, target: .condition("'weather' in topics && !('news' in topics)"),
                    precedence: .standard,
                    messageJSON: Array(#"{"android":{"ttl":"3600s"},"data":{"k":"v"}}"#.utf8))),
            .audience(
                AudienceRecord(
                    messageID: 42, sendSeq: 5, recipientCount: 1, recipientDigest: Array(repeating: 7, count: 32))),
            .acknowledged(token: token, through: 5),
        ]
        for (index, body) in bodies.enumerated() {
            var event = LedgerEvent(
                seq: UInt64(index + 1), time: LedgerTime(microseconds: 1_700_000_000_000_000), actor: "admin",
                requestID: "seed-\(index)", body: body)
            seeds.append(EventCodec.encode(event))
            // The same event sealed (encoding version 3), one value of it forgotten.
            var seals = (0..<body.sealedValueCount).map { Seal(key: Array(repeating: UInt8(index + $0), count: 32)) }
            if !seals.isEmpty { seals[0] = Seal(commitment: Array(repeating: 9, count: 32), forgotten: "erasure") }
            event.seals = seals
            seeds.append(EventCodec.encode(event))
        }
        return seeds
    }

    /// What a request body goes through before anything is appended: the strict body checks (UTF-8, no BOM,
    /// unique keys), JSON parsing (compared with JSONSerialization), FCM v1 message validation (targets, data,
    /// notification, the platform fields with their TTLs and headers), the lifetime parsers delivery reads back
    /// from stored messages, and the payload mapping (what a device receives). Nothing traps; a message that
    /// validates re-validates from its stored JSON to the same target and the same bytes (what is stored is what
    /// was checked); every TTL the validator accepts is within FCM's 0…4 weeks; the device payload of a validated
    /// message holds every data key as sent, the keys the mapping owns are never data, and its JSON parses back;
    /// the mapping of any bytes (a damaged stored message) does not trap and still renders JSON.
    public static func checkMessage(_ bytes: UnsafeBufferPointer<UInt8>) throws {
        let text = String(decoding: bytes, as: UTF8.self)
        // The parsers of untrusted numbers, on the raw text too.
        if let micros = MessageLifetimeBounds.microseconds(ofDuration: text),
            !(0...MessageLifetimeBounds.maximumSeconds * 1_000_000).contains(micros)
        {
            throw FuzzFailure("a duration outside 0…4 weeks was accepted: \(text)")
        }
        _ = MessageLifetimeBounds.expiryMicroseconds(ofAPNsExpiration: text)
        _ = LedgerTime(parsing: text)
        try checkPayload(of: Array(bytes), message: nil)
        try checkParserAgainstFoundation(bytes)
        guard StrictJSON.problem(in: bytes) == nil, let body = (try? JSONValue(parsing: bytes))?.object,
            let message = body["message"]?.object
        else { return }
        for rule in ConditionPrecedence.allCases {
            guard let validated = try? MessageValidation.validate(message, precedence: rule) else { continue }
            guard let stored = (try? JSONValue(parsing: validated.json))?.object,
                let again = try? MessageValidation.validate(stored, precedence: rule)
            else { throw FuzzFailure("a validated message does not validate from its stored JSON") }
            guard again == validated else { throw FuzzFailure("re-validating the stored message changed it") }
            let storedAny = try? JSONSerialization.jsonObject(with: Data(validated.json)) as? [String: Any]
            guard let storedAny, JSONValue(storedAny) == .object(stored) else {
                throw FuzzFailure("Foundation reads the stored message differently")
            }
            if let ttl = stored["android"]?.object?["ttl"]?.string,
                MessageLifetimeBounds.microseconds(ofDuration: ttl) == nil
            {
                throw FuzzFailure("a message with an out-of-range TTL was accepted: \(ttl)")
            }
            try checkPayload(of: validated.json, message: storedAny)
        }
    }

    /// Whether the parser's reading equals Foundation's, but for Foundation's number errors: it does not round
    /// decimal text of more than about 16 significant digits correctly (`333333333333333333333333.3` differs in
    /// its last bits, and a value near 2^63 may then land on the other side of an integer type's range), and it
    /// reads -2^63 as -2^63 + 1 or + 2. The same allowance as JSONParserTests' `nearlyEqual`. And one difference
    /// of reading: the parser reads a number with an exponent or a fraction as the nearest Double, Foundation
    /// sometimes as a Decimal (`444444444444444444e0` is 444444444444444416 here, 444444444444444444 there), so
    /// two integers may differ by rounding when the parser's is a Double's value (an integer read from digits
    /// alone is exact, and is not a Double's value unless it equals Foundation's).
    static func readAlike(_ parsed: JSONValue, _ foundation: JSONValue?) -> Bool {
        func double(_ value: JSONValue) -> Double? {
            switch value {
            case .integer(let integer): Double(integer)
            case .unsigned(let unsigned): Double(unsigned)
            case .number(let number): number
            default: nil
            }
        }
        switch (parsed, foundation) {
        case (.integer(.min), .integer(let other)) where other <= .min + 2: return true
        case (.array(let a), .array(let b)): return a.count == b.count && zip(a, b).allSatisfy { readAlike($0, $1) }
        case (.object(let a), .object(let b)):
            return a.count == b.count && a.allSatisfy { key, value in b[key].map { readAlike(value, $0) } ?? false }
        case (.number, _?), (_, .number?):
            guard let a = double(parsed), let b = foundation.flatMap(double) else { return false }
            return a == b || abs(a - b) <= 8 * max(a.ulp, b.ulp)
        case (.integer, .integer?), (.integer, .unsigned?), (.unsigned, .integer?), (.unsigned, .unsigned?):
            guard parsed != foundation else { return true }
            guard let a = double(parsed), let b = foundation.flatMap(double), isDoubleValue(parsed) else {
                return false
            }
            return abs(a - b) <= 8 * max(a.ulp, b.ulp)
        default: return parsed == foundation
        }
    }

    /// Whether an integer is exactly some Double's value (what a number read through a Double can be).
    static func isDoubleValue(_ value: JSONValue) -> Bool {
        switch value {
        case .integer(let integer): Double(exactly: integer) != nil
        case .unsigned(let unsigned): Double(exactly: unsigned) != nil
        default: false
        }
    }

    /// Whether the parser stopped at the `}` or `]` after a trailing comma, which `JSONSerialization` accepts
    /// and RFC 8259 (and Google's APIs) do not.
    static func isTrailingComma(_ error: JSONParseError, in bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard error.offset < bytes.count, [UInt8(ascii: "}"), UInt8(ascii: "]")].contains(bytes[error.offset]) else {
            return false
        }
        return bytes[..<error.offset].last { ![0x20, 0x09, 0x0A, 0x0D].contains($0) } == UInt8(ascii: ",")
    }

    /// The parser reads what `JSONSerialization` reads, as the same values; where only Foundation accepts the
    /// bytes, the route's strict checks (``StrictJSON``) refuse them anyway, they hold a surrogate escape, or
    /// they have a trailing comma.
    static func checkParserAgainstFoundation(_ bytes: UnsafeBufferPointer<UInt8>) throws {
        let foundation = (try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed]))
            .flatMap(JSONValue.init)
        let parsed: JSONValue
        do {
            parsed = try JSONValue(parsing: bytes)
        } catch {
            guard
                foundation == nil || StrictJSON.problem(in: bytes) != nil
                    || String(decoding: bytes, as: UTF8.self).lowercased().contains("\\ud")
                    || isTrailingComma(error, in: bytes)
            else {
                throw FuzzFailure("only JSONSerialization accepted the bytes: \(error)")
            }
            return
        }
        guard readAlike(parsed, foundation) else {
            throw FuzzFailure("the parser and JSONSerialization read different values")
        }
    }

    /// Maps `json` as a stored message and checks what a device of each platform would get. `message`: the
    /// stored message when it was validated (every data key must arrive as sent, unless the platform's own
    /// data or payload replaces it), nil for arbitrary bytes.
    static func checkPayload(of json: [UInt8], message: [String: Any]?) throws {
        let project = try! ProjectID("fuzz-project")
        for platform in DevicePlatform.allCases {
            let rendered = DevicePayload(
                ofMessageJSON: json, messageID: .max, target: .condition("x"), project: project, platform: platform)
            guard let payload = (try? JSONSerialization.jsonObject(with: Data(rendered.json))) as? [String: Any] else {
                throw FuzzFailure("a device payload is not a JSON object")
            }
            switch platform {
            case .ios:
                guard payload["gcm.message_id"] as? String == String(UInt64.max),
                    payload["from"] as? String == "fuzz-project"
                else { throw FuzzFailure("the iOS mapping lost its own keys") }
                if let aps = payload["aps"], !(aps is [String: Any]) { throw FuzzFailure("aps is not a dictionary") }
            case .android, .web:
                guard payload["messageId"] as? String == String(UInt64.max),
                    payload["from"] as? String == "fuzz-project"
                else { throw FuzzFailure("the \(platform) mapping lost its own keys") }
                if let data = payload["data"], !(data is [String: String]) { throw FuzzFailure("data is not strings") }
            }
            guard let message else { continue }
            let data = message["data"] as? [String: Any] ?? [:]
            for key in data.keys where DevicePayload.ownedKeys.contains(key) {
                throw FuzzFailure("validation accepted the data key \(key)")
            }
            guard platform == .ios else { continue }
            let apnsPayload = ((message["apns"] as? [String: Any])?["payload"] as? [String: Any]) ?? [:]
            for (key, value) in data where apnsPayload[key] == nil {
                guard payload[key] as? String == value as? String else {
                    throw FuzzFailure("data key \(key) was not delivered")
                }
            }
            for key in payload.keys
            where !DevicePayload.ownedKeys.contains(key) && data[key] == nil && apnsPayload[key] == nil {
                throw FuzzFailure("the payload has a key that is neither data, apns.payload nor the mapping's: \(key)")
            }
        }
    }
}
