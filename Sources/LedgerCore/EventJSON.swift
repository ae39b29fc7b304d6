/// Renders events as one JSON object per line (the `ledger log` export and the audit API's log).
///
/// Hand-written rather than `JSONEncoder`: the export streams millions of events and must be bounded by
/// decoding, and its key order is fixed so that lines diff cleanly. This output is audit data and carries
/// tokens by design; it must never be sent to a log.
public enum EventJSON {
    /// `{"seq":…,"time":…,"kind":…,<kind's fields>,"actor":…,"requestId":…,"prevHash":…,"hash":…}`.
    public static func line(_ event: LedgerEvent, prevHash: some Sequence<UInt8>, hash: some Sequence<UInt8>) -> String {
        var out = JSONObjectWriter()
        out.field("seq", number: event.seq)
        out.field("time", string: event.time.rfc3339)
        out.field("kind", string: event.kind.rawValue)
        switch event.body {
        case .registered(let token, let platform, let appID):
            out.field("token", string: token.rawValue)
            if let platform { out.field("platform", string: platform) }
            if let appID { out.field("appId", string: appID) }
        case .unregistered(let token, let reason):
            out.field("token", string: token.rawValue)
            out.field("reason", string: reason)
        case .subscribed(let token, let topic, let via), .unsubscribed(let token, let topic, let via):
            out.field("token", string: token.rawValue)
            out.field("topic", string: topic.rawValue)
            out.field("via", string: via.rawValue)
        case .sent(let sent):
            out.field("messageId", string: String(sent.messageID))
            out.field("target", raw: "{\(JSONObjectWriter.quoted(sent.target.kindName)):\(JSONObjectWriter.quoted(sent.target.text))}")
            out.field("precedence", string: sent.precedence.rawValue)
            out.field("message", raw: sent.messageJSON.isEmpty ? "{}" : String(decoding: sent.messageJSON, as: UTF8.self))
        case .audience(let audience):
            out.field("messageId", string: String(audience.messageID))
            out.field("sendSeq", number: audience.sendSeq)
            out.field("recipientCount", number: audience.recipientCount)
            out.field("recipientDigest", string: audience.recipientDigest.hexString)
        }
        out.field("actor", string: event.actor)
        out.field("requestId", string: event.requestID)
        out.field("prevHash", string: prevHash.hexString)
        out.field("hash", string: hash.hexString)
        return out.finish()
    }
}

/// Builds one JSON object with fields in the order given.
public struct JSONObjectWriter {
    private var text = "{"
    private var first = true

    public init() {}

    public mutating func field(_ name: String, string value: String) { field(name, raw: Self.quoted(value)) }
    public mutating func field(_ name: String, number value: some BinaryInteger) { field(name, raw: String(value)) }
    public mutating func field(_ name: String, bool value: Bool) { field(name, raw: value ? "true" : "false") }

    /// Adds a field whose value is already JSON.
    public mutating func field(_ name: String, raw value: String) {
        if !first { text += "," }
        first = false
        text += Self.quoted(name)
        text += ":"
        text += value
    }

    public mutating func finish() -> String { text + "}" }

    /// `value` as a JSON string literal.
    public static func quoted(_ value: String) -> String {
        var out = "\""
        out.reserveCapacity(value.utf8.count + 2)
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        out += "\""
        return out
    }
}
