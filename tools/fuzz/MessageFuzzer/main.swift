// libFuzzer target for what a request body goes through before anything is appended: the strict body checks
// (UTF-8, no BOM, unique keys), JSON decoding, FCM v1 message validation (targets, data, notification, the
// platform fields with their TTLs and headers), and the lifetime parsers delivery reads back from stored
// messages. Build and run with tools/fuzz/run.sh.
//
// For every input: nothing traps; a message that validates re-validates from its stored JSON to the same
// target and the same bytes (what is stored is what was checked); every TTL the validator accepts is within
// FCM's 0…4 weeks.

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
    }
    return 0
}

runFuzzer(fuzzOneInput)
