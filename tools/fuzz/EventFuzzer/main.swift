// libFuzzer target for the stored-event decoder: whatever bytes a log record holds — a damaged disk, a
// hand-edited copy, a future version — reading them never traps. Build and run with tools/fuzz/run.sh.
//
// For every input: decoding answers an event or an error; the hand-written canonical decoder, when it
// answers, agrees with SwiftProtobuf's; a decoded event renders as a `ledger log` line and encodes to bytes
// that decode to the same event with the same seals; its hash recomputes (or is refused) without trapping.

import Foundation
import FuzzDriver
import LedgerCore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data else { return 0 }
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    if size > 1 {
        let body = UnsafeRawBufferPointer(rebasing: bytes.dropFirst())
        if let fast = CanonicalEventDecoder.decode(body) {
            guard let reference = try? EventCodec.decodeWithSwiftProtobuf(body), reference == fast else {
                fatalError("the canonical decoder and SwiftProtobuf disagree")
            }
        }
    }
    guard let event = try? EventCodec.decode(bytes) else { return 0 }
    _ = EventJSON.line(event, prevHash: [UInt8](repeating: 0, count: 32), hash: [UInt8](repeating: 1, count: 32))
    guard let again = try? EventCodec.decode(EventCodec.encode(event)), again == event, again.seals == event.seals
    else {
        fatalError("a decoded event does not survive encode → decode")
    }
    _ = try? HashChain.recomputedHash(previous: [UInt8](repeating: 0, count: 32), encodedEvent: bytes, decoded: event)
    return 0
}

// `EventFuzzer --write-seeds DIR`: writes one encoded event of each kind as the starting corpus.
if CommandLine.arguments.count == 3, CommandLine.arguments[1] == "--write-seeds" {
    let token = try! RegistrationToken("cVsq3Z7cQ1GeEk1r0AGqjv:APA91bH-seed")
    let topic = try! TopicName("weather")
    let bodies: [LedgerEvent.Body] = [
        .registered(token: token, platform: "ios", appID: "com.example"),
        .subscribed(token: token, topic: topic, via: .iid),
        .unsubscribed(token: token, topic: topic, via: .client),
        .unregistered(token: token, reason: "uninstalled"),
        .sent(
            SentMessage(
                messageID: 42, target: .condition("'weather' in topics && !('news' in topics)"), precedence: .standard,
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
        _ = FileManager.default.createFile(
            atPath: CommandLine.arguments[2] + "/seed-\(index)", contents: Data(EventCodec.encode(event)))
        // The same event sealed (encoding version 3), one value of it forgotten.
        var seals = (0..<body.sealedValueCount).map { Seal(key: Array(repeating: UInt8(index + $0), count: 32)) }
        if !seals.isEmpty { seals[0] = Seal(commitment: Array(repeating: 9, count: 32), forgotten: "erasure") }
        event.seals = seals
        _ = FileManager.default.createFile(
            atPath: CommandLine.arguments[2] + "/sealed-seed-\(index)", contents: Data(EventCodec.encode(event)))
    }
    exit(0)
}

runFuzzer(fuzzOneInput)
