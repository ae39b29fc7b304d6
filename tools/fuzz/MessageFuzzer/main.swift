// libFuzzer target for what a request body goes through before anything is appended: the strict body checks
// (UTF-8, no BOM, unique keys), JSON decoding, FCM v1 message validation (targets, data, notification, the
// platform fields with their TTLs and headers), the lifetime parsers delivery reads back from stored
// messages, and the payload mapping (what a device receives). Build and run with tools/fuzz/run.sh.
//
// For every input: nothing traps; a message that validates re-validates from its stored JSON to the same
// target and the same bytes (what is stored is what was checked); every TTL the validator accepts is within
// FCM's 0…4 weeks; the device payload of a validated message holds every data key as sent, the keys the
// mapping owns are never data, and its JSON parses back; the mapping of any bytes (a damaged stored message)
// does not trap and still renders JSON.

import Foundation
import FuzzDriver
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
    guard StrictJSON.problem(in: bytes) == nil,
        let object = try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed]),
        let body = object as? [String: Any], let message = body["message"] as? [String: Any]
    else { return 0 }
    for rule in ConditionPrecedence.allCases {
        guard let validated = try? MessageValidation.validate(message, precedence: rule) else { continue }
        guard let stored = try? JSONSerialization.jsonObject(with: Data(validated.json)) as? [String: Any],
            let again = try? MessageValidation.validate(stored, precedence: rule)
        else { fatalError("a validated message does not validate from its stored JSON") }
        guard again == validated else { fatalError("re-validating the stored message changed it") }
        if let ttl = (stored["android"] as? [String: Any])?["ttl"] as? String,
            MessageLifetimeBounds.microseconds(ofDuration: ttl) == nil
        {
            fatalError("a message with an out-of-range TTL was accepted: \(ttl)")
        }
        checkPayload(of: validated.json, message: stored)
    }
    return 0
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
