/// Renders events as one JSON object per line (the `ledger log` export and the audit API's log).
///
/// Hand-written over bytes rather than `JSONEncoder`: the export streams millions of events and must be
/// bounded by decoding, and its key order is fixed so that lines diff cleanly. This output is audit data
/// and carries tokens by design; it must never be sent to a log.
public enum EventJSON {
    /// Appends `{"seq":…,"time":…,"kind":…,<kind's fields>,"actor":…,"requestId":…,"prevHash":…,"hash":…}`
    /// (no newline) to `out`.
    public static func write(
        _ event: LedgerEvent, prevHash: some Sequence<UInt8>, hash: some Sequence<UInt8>, into out: inout [UInt8]
    ) {
        var json = JSONObjectWriter(appendingTo: JSONObjectWriter.take(&out))
        json.field("seq", number: event.seq)
        json.field("time", time: event.time)
        json.field("kind", string: event.kind.rawValue)
        switch event.body {
        case .registered(let token, let platform, let appID):
            json.field("token", string: token.rawValue)
            if let platform { json.field("platform", string: platform) }
            if let appID { json.field("appId", string: appID) }
        case .unregistered(let token, let reason):
            json.field("token", string: token.rawValue)
            json.field("reason", string: reason)
        case .subscribed(let token, let topic, let via), .unsubscribed(let token, let topic, let via):
            json.field("token", string: token.rawValue)
            json.field("topic", string: topic.rawValue)
            json.field("via", string: via.rawValue)
        case .sent(let sent):
            json.field("messageId", string: String(sent.messageID))
            var target = JSONObjectWriter()
            target.field(sent.target.kindName, string: sent.target.text)
            json.field("target", raw: target.finishBytes())
            json.field("precedence", string: sent.precedence.rawValue)
            json.field("message", raw: sent.messageJSON.isEmpty ? Array("{}".utf8) : sent.messageJSON)
            if let channel = sent.broadcastChannelID { json.field("broadcastChannelId", string: channel) }
            if let activity = sent.topicActivity { json.field("topicActivity", string: activity.name) }
            if case .pushToStart(let type)? = sent.topicActivity { json.field("attributesType", string: type) }
            if let forgotten = event.contentForgotten {
                json.field("contentForgotten", string: "content forgotten by \(forgotten)")
            }
        case .audience(let audience):
            json.field("messageId", string: String(audience.messageID))
            json.field("sendSeq", number: audience.sendSeq)
            json.field("recipientCount", number: audience.recipientCount)
            json.field("recipientDigest", hex: audience.recipientDigest)
            json.field("digestVersion", number: UInt64(audience.digestVersion.rawValue))
        case .acknowledged(let token, let through):
            json.field("token", string: token.rawValue)
            json.field("throughSeq", number: through)
        case .apnsTokenSet(let token, let apnsToken):
            json.field("token", string: token.rawValue)
            json.field("apnsToken", hex: apnsToken.bytes)
            json.field("apnsSandbox", bool: apnsToken.sandbox)
        case .apnsTokenCleared(let token, let reason):
            json.field("token", string: token.rawValue)
            json.field("reason", string: reason)
        case .pushProgress(let progress):
            json.field("sendSeq", number: progress.sendSeq)
            if let through = progress.throughToken { json.field("throughToken", string: through.rawValue) }
            json.field("finished", bool: progress.finished)
            json.field("expired", bool: progress.expired)
            var failures: [UInt8] = [UInt8(ascii: "[")]
            for (index, failure) in progress.failures.enumerated() {
                if index > 0 { failures.append(UInt8(ascii: ",")) }
                var entry = JSONObjectWriter(appendingTo: JSONObjectWriter.take(&failures))
                entry.field("token", string: failure.token.rawValue)
                entry.field("kind", string: failure.kind.rawValue)
                entry.field("status", number: failure.status)
                entry.field("reason", string: failure.reason)
                failures = entry.finishBytes()
            }
            failures.append(UInt8(ascii: "]"))
            json.field("failures", raw: failures)
            json.field("settledThrough", number: progress.settledThrough)
            if let broadcast = progress.broadcast {
                var entry = JSONObjectWriter()
                entry.field("channelId", string: broadcast.channelID)
                entry.field("status", number: broadcast.status)
                entry.field("reason", string: broadcast.reason)
                entry.field("apnsRequestId", string: broadcast.apnsRequestID)
                json.field("broadcast", raw: entry.finishBytes())
            }
        case .erased(let erasure):
            json.field("pseudonym", string: erasure.pseudonym.rawValue)
            json.field("registeredSeq", number: erasure.registeredSeq)
            json.field("reason", string: erasure.reason)
            json.field("redactedEvents", number: erasure.redactedEvents)
        case .retention(let sweep):
            json.field("firstSeq", number: sweep.firstSeq)
            json.field("throughSeq", number: sweep.throughSeq)
            json.field("cutoff", string: sweep.cutoff.rfc3339)
            json.field("forgottenContents", number: sweep.forgottenContents)
            json.field("unsealedContents", number: sweep.unsealedContents)
        case .liveActivityChannelCreated(let change):
            json.field("topic", string: change.topic.rawValue)
            json.field("channelId", string: change.channelID)
            json.field("messageStoragePolicy", number: change.messageStoragePolicy)
            json.field("apnsRequestId", string: change.apnsRequestID)
        case .liveActivityChannelDeleted(let change):
            json.field("topic", string: change.topic.rawValue)
            json.field("channelId", string: change.channelID)
            json.field("apnsRequestId", string: change.apnsRequestID)
            json.field("reason", string: change.reason)
        case .liveActivityFollowed(let token, let topic, let pushToken):
            json.field("token", string: token.rawValue)
            json.field("topic", string: topic.rawValue)
            json.field("pushToken", hex: pushToken.bytes)
        case .liveActivityUnfollowed(let token, let topic, let reason):
            json.field("token", string: token.rawValue)
            json.field("topic", string: topic.rawValue)
            json.field("reason", string: reason)
        case .pushToStartTokenSet(let token, let attributesType, let pushToken):
            json.field("token", string: token.rawValue)
            json.field("attributesType", string: attributesType)
            json.field("pushToken", hex: pushToken.bytes)
        case .liveActivitiesEnded(let topic, let sendSeq, let messageID):
            json.field("topic", string: topic.rawValue)
            json.field("sendSeq", number: sendSeq)
            json.field("messageId", string: String(messageID))
        }
        json.field("actor", string: event.actor)
        json.field("requestId", string: event.requestID)
        json.field("prevHash", hex: prevHash)
        json.field("hash", hex: hash)
        out = json.finishBytes()
    }

    /// The event's JSON line as a string (no newline).
    public static func line(_ event: LedgerEvent, prevHash: some Sequence<UInt8>, hash: some Sequence<UInt8>) -> String
    {
        var bytes: [UInt8] = []
        write(event, prevHash: prevHash, hash: hash, into: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// Builds one JSON object, fields in the order given, directly as UTF-8 bytes.
public struct JSONObjectWriter {
    private var bytes: [UInt8]
    private var first = true

    public init() { self.init(appendingTo: []) }

    /// Continues `prefix` (which may hold earlier lines) with a new object. Pass it with ``take(_:)``, so that
    /// the writer holds the only reference to its storage and appends in place: a copy held elsewhere makes the
    /// first append copy every byte before it, once per object — quadratic over a page of events.
    public init(appendingTo prefix: consuming [UInt8]) {
        bytes = consume prefix
        if bytes.isEmpty { bytes.reserveCapacity(512) }
        bytes.append(UInt8(ascii: "{"))
    }

    /// The bytes of `buffer`, leaving it empty: hands them to ``init(appendingTo:)`` without a second reference.
    public static func take(_ buffer: inout [UInt8]) -> [UInt8] {
        var taken: [UInt8] = []
        swap(&taken, &buffer)
        return taken
    }

    public mutating func field(_ name: String, string value: String) {
        key(name)
        Self.appendQuoted(value, to: &bytes)
    }

    public mutating func field(_ name: String, number value: some BinaryInteger) {
        key(name)
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        appendDigits(UInt64(value.magnitude), minimumWidth: 1, to: &bytes)
    }

    public mutating func field(_ name: String, bool value: Bool) {
        key(name)
        bytes.append(contentsOf: (value ? "true" : "false").utf8)
    }

    /// A string of lowercase hexadecimal digits.
    public mutating func field(_ name: String, hex value: some Sequence<UInt8>) {
        key(name)
        bytes.append(UInt8(ascii: "\""))
        for byte in value {
            bytes.append(hexDigits[Int(byte >> 4)])
            bytes.append(hexDigits[Int(byte & 0xF)])
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// An RFC 3339 time string with microseconds.
    public mutating func field(_ name: String, time value: LedgerTime) {
        key(name)
        bytes.append(UInt8(ascii: "\""))
        value.appendRFC3339(to: &bytes)
        bytes.append(UInt8(ascii: "\""))
    }

    /// A field whose value is already JSON.
    public mutating func field(_ name: String, raw value: [UInt8]) {
        key(name)
        bytes.append(contentsOf: value)
    }

    public mutating func field(_ name: String, raw value: String) { field(name, raw: Array(value.utf8)) }

    public mutating func finishBytes() -> [UInt8] {
        bytes.append(UInt8(ascii: "}"))
        return bytes
    }

    public mutating func finish() -> String { String(decoding: finishBytes(), as: UTF8.self) }

    private mutating func key(_ name: String) {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
        Self.appendQuoted(name, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
    }

    /// `value` as a JSON string literal.
    public static func quoted(_ value: String) -> String {
        var out: [UInt8] = []
        appendQuoted(value, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// Escapes at the byte level: bytes of multi-byte UTF-8 sequences are all ≥ 0x80 and pass through.
    static func appendQuoted(_ value: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        defer { out.append(UInt8(ascii: "\"")) }
        // Most strings (tokens, names, times) need no escape: copied whole, not byte by byte, and scanned as
        // a buffer of their UTF-8 (`withUTF8`) rather than through `String.UTF8View`'s checked indices.
        var value = value
        let copied = value.withUTF8 { bytes in
            guard bytes.allSatisfy({ $0 >= 0x20 && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }) else {
                return false
            }
            out.append(contentsOf: bytes)
            return true
        }
        if copied { return }
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case UInt8(ascii: "\n"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case UInt8(ascii: "\r"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case UInt8(ascii: "\t"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0..<0x20:
                out.append(contentsOf: Array("\\u00".utf8))
                out.append(hexDigits[Int(byte >> 4)])
                out.append(hexDigits[Int(byte & 0xF)])
            default: out.append(byte)
            }
        }
    }
}

private let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

/// Appends the decimal digits of `value`, left-padded with zeros to `minimumWidth`.
@inline(__always)
func appendDigits(_ value: UInt64, minimumWidth: Int, to out: inout [UInt8]) {
    var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)
    withUnsafeMutableBytes(of: &digits) { buffer in
        var remaining = value
        var index = buffer.count
        repeat {
            index -= 1
            buffer[index] = UInt8(ascii: "0") + UInt8(remaining % 10)
            remaining /= 10
        } while remaining > 0
        while buffer.count - index < minimumWidth {
            index -= 1
            buffer[index] = UInt8(ascii: "0")
        }
        out.append(contentsOf: buffer[index...])
    }
}
