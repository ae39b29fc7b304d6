import FCMWire
import LedgerCore
import LedgerTestSupport
import Testing

@Suite("Topic names, tokens, project ids", .offThePool)
struct ValidationTests {
    @Test(
        "valid topic names are accepted; /topics/ is stripped",
        arguments: [
            ("news", "news"), ("/topics/news", "news"), ("a-b_c.d~e%f", "a-b_c.d~e%f"), ("TopicA", "TopicA"),
            (String(repeating: "x", count: 900), String(repeating: "x", count: 900)),
        ])
    func validTopics(input: String, expected: String) throws {
        #expect(try TopicName(input).rawValue == expected)
    }

    @Test(
        "invalid topic names are refused naming the field and the fault",
        arguments: [
            ("", "empty"), ("/topics/", "empty"), ("a b", "offset 1"), ("news!", "offset 4"), ("é", "offset 0"),
            (String(repeating: "x", count: 901), "longer than 900"), ("/topics/a/b", "offset 1"),
            ("topic\n", "offset 5"),
        ])
    func invalidTopics(input: String, fragment: String) {
        #expect {
            try TopicName(input, field: "message.topic")
        } throws: { error in
            guard let error = error as? LedgerCoreError else { return false }
            return error.code == .invalidArgument && error.field == "message.topic" && error.message.contains(fragment)
        }
    }

    @Test("topic names are case-sensitive")
    func caseSensitive() throws {
        #expect(try TopicName("News") != TopicName("news"))
    }

    @Test("registration tokens: FCM-shaped tokens pass, malformed ones are refused")
    func tokens() throws {
        #expect(throws: Never.self) { try RegistrationToken("cXyZ-123:APA91bH_q.x") }
        for bad in ["", "has space", "slash/", "ü", String(repeating: "a", count: 4097), "quote\""] {
            #expect(throws: LedgerCoreError.self) { try RegistrationToken(bad, field: "registration_tokens[0]") }
        }
    }

    @Test("the first byte outside the token alphabet is found at every offset")
    func tokenAlphabetScan() throws {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:.-".utf8)
        var generator = SeededGenerator(seed: 14)
        var refused = 0
        for _ in 0..<4000 {
            var bytes = (0..<Int.random(in: 1...70, using: &generator)).map { _ in
                alphabet.randomElement(using: &generator)!
            }
            // Zero to two bytes of any value (the neighbours of the alphabet's ranges included), anywhere.
            for _ in 0..<Int.random(in: 0...2, using: &generator) {
                bytes[Int.random(in: 0..<bytes.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator)
            }
            let text = String(decoding: bytes, as: UTF8.self)  // an invalid sequence becomes U+FFFD
            let expected = text.utf8.firstIndex { !alphabet.contains($0) }.map {
                text.utf8.distance(from: text.utf8.startIndex, to: $0)
            }
            guard text.utf8.count <= RegistrationToken.maximumLength else { continue }
            do {
                _ = try RegistrationToken(text)
                #expect(expected == nil, "\(bytes) accepted")
            } catch {
                refused += 1
                #expect(expected != nil && "\(error)".hasSuffix("at offset \(expected!)"), "\(bytes): \(error)")
            }
        }
        #expect(refused > 1000)
        // Every byte value alone, and after sixteen valid ones (the eight-at-a-time path).
        for byte in UInt8.min...UInt8.max {
            for prefix in ["", String(repeating: "a", count: 16)] {
                let text = prefix + String(decoding: [byte], as: UTF8.self)
                let valid = text.utf8.allSatisfy { alphabet.contains($0) }
                #expect((try? RegistrationToken(text)) != nil || !valid, "byte \(byte) refused")
                #expect((try? RegistrationToken(text)) == nil || valid, "byte \(byte) accepted")
            }
        }
    }

    @Test("tokens never print themselves")
    func tokenRedaction() throws {
        let token = try RegistrationToken("secret-token-value")
        #expect(!"\(token)".contains("secret"))
    }

    @Test("project ids cannot escape the data directory")
    func projectIDs() {
        #expect(throws: Never.self) { try ProjectID("my-project-123") }
        for bad in ["", "..", "../etc", "a/b", ".hidden", String(repeating: "p", count: 101)] {
            #expect(throws: LedgerCoreError.self) { try ProjectID(bad) }
        }
    }
}

@Suite("Time", .offThePool)
struct LedgerTimeTests {
    @Test("RFC 3339 formatting and parsing round-trip to the microsecond")
    func roundTrip() {
        for micros: Int64 in [0, 1, 999_999, 1_700_000_000_123_456, 4_102_444_800_000_000, -1] {
            let time = LedgerTime(microseconds: micros)
            #expect(LedgerTime(parsing: time.rfc3339) == time)
        }
        #expect(LedgerTime(microseconds: 0).rfc3339 == "1970-01-01T00:00:00.000000Z")
        #expect(LedgerTime(microseconds: 951_782_400_000_000).date == "2000-02-29")
    }

    @Test("accepted input forms")
    func parsing() {
        #expect(LedgerTime(parsing: "2026-03-01")?.rfc3339 == "2026-03-01T00:00:00.000000Z")
        #expect(LedgerTime(parsing: "2026-03-01T12:30Z")?.rfc3339 == "2026-03-01T12:30:00.000000Z")
        #expect(LedgerTime(parsing: "2026-03-01T12:30:05.5Z")?.rfc3339 == "2026-03-01T12:30:05.500000Z")
        #expect(LedgerTime(parsing: "2026-03-01T14:30:05+02:00")?.rfc3339 == "2026-03-01T12:30:05.000000Z")
        #expect(LedgerTime(parsing: "2026-03-01T12:30:05.1234567Z")?.rfc3339 == "2026-03-01T12:30:05.123456Z")
        #expect(LedgerTime(parsing: "1700000000000000")?.microseconds == 1_700_000_000_000_000)
        for bad in ["", "yesterday", "2026-13-01", "2026-03-01T25:00Z", "2026-03-01T12:00", "2026-03-01T12:00:00Zjunk"]
        {
            #expect(LedgerTime(parsing: bad) == nil, "\(bad)")
        }
    }
}

@Suite("JSON export", .offThePool)
struct EventJSONTests {
    @Test("a log line has the documented keys in order, escapes strings and embeds the message")
    func line() throws {
        let token = try RegistrationToken("tok")
        let event = LedgerEvent(
            seq: 3, time: LedgerTime(microseconds: 0), actor: "ad\"min", requestID: "r\n1",
            body: .sent(
                SentMessage(
                    messageID: 42, target: .condition("'a' in topics"), precedence: .standard,
                    messageJSON: Array(#"{"data":{"k":"v"}}"#.utf8))))
        let line = EventJSON.line(event, prevHash: [0xAB], hash: [0x01, 0xFF])
        #expect(
            line
                == #"{"seq":3,"time":"1970-01-01T00:00:00.000000Z","kind":"sent","messageId":"42","target":{"condition":"'a' in topics"},"precedence":"standard","message":{"data":{"k":"v"}},"actor":"ad\"min","requestId":"r\n1","prevHash":"ab","hash":"01ff"}"#
        )
        let subscribed = LedgerEvent(
            seq: 1, time: LedgerTime(microseconds: 0), actor: "a", requestID: "r",
            body: .subscribed(token: token, topic: try TopicName("news"), via: .iid))
        #expect(
            EventJSON.line(subscribed, prevHash: [], hash: []).contains(#""token":"tok","topic":"news","via":"iid""#))
        #expect(JSONObjectWriter.quoted("\u{01}é") == #""\u0001é""#)
        var numbers = JSONObjectWriter()
        numbers.field("negative", number: -42)
        numbers.field("max", number: UInt64.max)
        numbers.field("zero", number: 0)
        #expect(numbers.finish() == #"{"negative":-42,"max":18446744073709551615,"zero":0}"#)
    }
}
