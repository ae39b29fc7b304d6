// libFuzzer target for what a request body goes through before anything is appended: the strict body checks
// (UTF-8, no BOM, unique keys), JSON parsing (compared with JSONSerialization), FCM v1 message validation
// (targets, data, notification, the platform fields with their TTLs and headers), the lifetime parsers
// delivery reads back from stored messages, and the payload mapping (what a device receives). Build and run
// with tools/fuzz/run.sh.
//
// For every input: nothing traps; a message that validates re-validates from its stored JSON to the same
// target and the same bytes (what is stored is what was checked); every TTL the validator accepts is within
// FCM's 0…4 weeks; the device payload of a validated message holds every data key as sent, the keys the
// mapping owns are never data, and its JSON parses back; the mapping of any bytes (a damaged stored message)
// does not trap and still renders JSON.

import Foundation
import FuzzDriver
import FCMWire
import LedgerCore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data else { return 0 }
    let bytes = UnsafeBufferPointer(start: data, count: size)
    let text = String(decoding: bytes, as: UTF8.self)
    // The parsers of untrusted numbers, on the raw text too.
    if let micros = MessageLifetimeBounds.microseconds(ofDuration: text),
        !(0...MessageLifetimeBounds.maximumSeconds * 1_000_000).contains(micros)
    {
        fatalError("a duration outside 0…4 weeks was accepted: \(text)")
    }
    _ = MessageLifetimeBounds.expiryMicroseconds(ofAPNsExpiration: text)
    _ = LedgerTime(parsing: text)
    checkPayload(of: Array(bytes), message: nil)
    checkParserAgainstFoundation(bytes)
    guard StrictJSON.problem(in: bytes) == nil, let body = (try? JSONValue(parsing: bytes))?.object,
        let message = body["message"]?.object
    else { return 0 }
    for rule in ConditionPrecedence.allCases {
        guard let validated = try? MessageValidation.validate(message, precedence: rule) else { continue }
        guard let stored = (try? JSONValue(parsing: validated.json))?.object,
            let again = try? MessageValidation.validate(stored, precedence: rule)
        else { fatalError("a validated message does not validate from its stored JSON") }
        guard again == validated else { fatalError("re-validating the stored message changed it") }
        let storedAny = try? JSONSerialization.jsonObject(with: Data(validated.json)) as? [String: Any]
        guard let storedAny, JSONValue(storedAny) == .object(stored) else {
            fatalError("Foundation reads the stored message differently")
        }
        if let ttl = stored["android"]?.object?["ttl"]?.string,
            MessageLifetimeBounds.microseconds(ofDuration: ttl) == nil
        {
            fatalError("a message with an out-of-range TTL was accepted: \(ttl)")
        }
        checkPayload(of: validated.json, message: storedAny)
    }
    return 0
}

/// Whether the parser's reading equals Foundation's, but for Foundation's number errors: it does not round
/// decimal text of more than about 16 significant digits correctly (`333333333333333333333333.3` differs in
/// its last bits, and a value near 2^63 may then land on the other side of an integer type's range), and it
/// reads -2^63 as -2^63 + 1 or + 2. The same allowance as JSONParserTests' `nearlyEqual`. And one difference
/// of reading: the parser reads a number with an exponent or a fraction as the nearest Double, Foundation
/// sometimes as a Decimal (`444444444444444444e0` is 444444444444444416 here, 444444444444444444 there), so
/// two integers may differ by rounding when the parser's is a Double's value (an integer read from digits
/// alone is exact, and is not a Double's value unless it equals Foundation's).
func readAlike(_ parsed: JSONValue, _ foundation: JSONValue?) -> Bool {
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
        guard let a = double(parsed), let b = foundation.flatMap(double), isDoubleValue(parsed) else { return false }
        return abs(a - b) <= 8 * max(a.ulp, b.ulp)
    default: return parsed == foundation
    }
}

/// Whether an integer is exactly some Double's value (what a number read through a Double can be).
func isDoubleValue(_ value: JSONValue) -> Bool {
    switch value {
    case .integer(let integer): Double(exactly: integer) != nil
    case .unsigned(let unsigned): Double(exactly: unsigned) != nil
    default: false
    }
}

/// Whether the parser stopped at the `}` or `]` after a trailing comma, which `JSONSerialization` accepts
/// and RFC 8259 (and Google's APIs) do not.
func isTrailingComma(_ error: JSONParseError, in bytes: UnsafeBufferPointer<UInt8>) -> Bool {
    guard error.offset < bytes.count, [UInt8(ascii: "}"), UInt8(ascii: "]")].contains(bytes[error.offset]) else {
        return false
    }
    return bytes[..<error.offset].last { ![0x20, 0x09, 0x0A, 0x0D].contains($0) } == UInt8(ascii: ",")
}

/// The parser reads what `JSONSerialization` reads, as the same values; where only Foundation accepts the
/// bytes, the route's strict checks (``StrictJSON``) refuse them anyway, they hold a surrogate escape, or
/// they have a trailing comma.
func checkParserAgainstFoundation(_ bytes: UnsafeBufferPointer<UInt8>) {
    let foundation = (try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed]))
        .flatMap(JSONValue.init)
    do {
        let parsed = try JSONValue(parsing: bytes)
        guard readAlike(parsed, foundation) else {
            fatalError("the parser and JSONSerialization read different values")
        }
    } catch {
        guard
            foundation == nil || StrictJSON.problem(in: bytes) != nil
                || String(decoding: bytes, as: UTF8.self).lowercased().contains("\\ud")
                || isTrailingComma(error, in: bytes)
        else {
            fatalError("only JSONSerialization accepted the bytes: \(error)")
        }
    }
}

/// Maps `json` as a stored message and checks what a device of each platform would get. `message`: the
/// stored message when it was validated (every data key must arrive as sent, unless the platform's own
/// data or payload replaces it), nil for arbitrary bytes.
func checkPayload(of json: [UInt8], message: [String: Any]?) {
    let project = try! ProjectID("fuzz-project")
    for platform in DevicePlatform.allCases {
        let rendered = DevicePayload(
            ofMessageJSON: json, messageID: .max, target: .condition("x"), project: project, platform: platform)
        guard let payload = (try? JSONSerialization.jsonObject(with: Data(rendered.json))) as? [String: Any] else {
            fatalError("a device payload is not a JSON object")
        }
        switch platform {
        case .ios:
            guard payload["gcm.message_id"] as? String == String(UInt64.max),
                payload["from"] as? String == "fuzz-project"
            else { fatalError("the iOS mapping lost its own keys") }
            if let aps = payload["aps"], !(aps is [String: Any]) { fatalError("aps is not a dictionary") }
        case .android, .web:
            guard payload["messageId"] as? String == String(UInt64.max), payload["from"] as? String == "fuzz-project"
            else { fatalError("the \(platform) mapping lost its own keys") }
            if let data = payload["data"], !(data is [String: String]) { fatalError("data is not strings") }
        }
        guard let message else { continue }
        let data = message["data"] as? [String: Any] ?? [:]
        for key in data.keys where DevicePayload.ownedKeys.contains(key) {
            fatalError("validation accepted the data key \(key)")
        }
        guard platform == .ios else { continue }
        let apnsPayload = ((message["apns"] as? [String: Any])?["payload"] as? [String: Any]) ?? [:]
        for (key, value) in data where apnsPayload[key] == nil {
            guard payload[key] as? String == value as? String else { fatalError("data key \(key) was not delivered") }
        }
        for key in payload.keys
        where !DevicePayload.ownedKeys.contains(key) && data[key] == nil && apnsPayload[key] == nil {
            fatalError("the payload has a key that is neither data, apns.payload nor the mapping's: \(key)")
        }
    }
}

runFuzzer(fuzzOneInput)
