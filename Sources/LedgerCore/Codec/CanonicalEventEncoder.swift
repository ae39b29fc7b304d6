/// A fast path for encoding the events every append writes: `registered`, `unregistered`, `subscribed`,
/// `unsubscribed` and `acknowledged`, byte for byte as SwiftProtobuf encodes them (fields in number order,
/// proto3 defaults left out, `optional` fields written when set). The counterpart of
/// ``CanonicalEventDecoder``.
///
/// Why by hand: SwiftProtobuf builds a message (a boxed `oneof` body), walks it once to size it and again
/// to write it, into an array that is then copied after the record's hash. That was a quarter of the bulk
/// import's appending thread (`HashChain.record` 17 % of all samples, of which encoding 10.5 %;
/// docs/performance.md). This computes the size, reserves it once, and writes the wire format straight into
/// the record. Sends and audiences (rare, and with more fields) are left to SwiftProtobuf. A property test
/// compares both encoders on random events, and the edge values (zero, negative times, long strings).
package enum CanonicalEventEncoder {
    /// Appends `prefix` (the format-version byte), then the protobuf message of `event`, to `bytes`, with one
    /// reservation for both; false, with `bytes` untouched, for a kind this path leaves to SwiftProtobuf.
    package static func append(_ event: LedgerEvent, after prefix: UInt8, to bytes: inout [UInt8]) -> Bool {
        let field: UInt64
        var body = BodyFields()
        switch event.body {
        case .registered(let token, let platform, let appID):
            field = 10
            body.token = token.rawValue
            body.second = platform
            body.third = appID
        case .unregistered(let token, let reason):
            field = 11
            body.token = token.rawValue
            body.second = reason.isEmpty ? nil : reason
        case .subscribed(let token, let topic, let via), .unsubscribed(let token, let topic, let via):
            field = event.kind == .subscribed ? 12 : 13
            body.token = token.rawValue
            body.second = topic.rawValue.isEmpty ? nil : topic.rawValue
            body.varintField = 3
            body.varint = via.wireValue
        case .acknowledged(let token, let through):
            field = 16
            body.token = token.rawValue
            body.varintField = 2
            body.varint = through
        case .sent, .audience, .apnsTokenSet, .apnsTokenCleared, .pushProgress, .erased, .retention,
            .liveActivityChannelCreated, .liveActivityChannelDeleted, .liveActivityFollowed, .liveActivityUnfollowed,
            .pushToStartTokenSet, .liveActivitiesEnded:
            return false
        }
        let bodySize = body.size
        let micros = UInt64(bitPattern: event.time.microseconds)
        var size = fieldSize(varint: event.seq) + fieldSize(varint: micros)
        size += fieldSize(string: event.actor) + fieldSize(string: event.requestID)
        size += varintSize(field << 3) + varintSize(UInt64(bodySize)) + bodySize
        bytes.reserveRoom(for: 1 + size)
        bytes.append(prefix)
        if event.seq != 0 { appendVarintField(1, event.seq, to: &bytes) }
        if micros != 0 { appendVarintField(2, micros, to: &bytes) }
        if !event.actor.isEmpty { appendStringField(3, event.actor, to: &bytes) }
        if !event.requestID.isEmpty { appendStringField(4, event.requestID, to: &bytes) }
        appendVarint(field << 3 | 2, to: &bytes)
        appendVarint(UInt64(bodySize), to: &bytes)
        body.append(to: &bytes)
        return true
    }

    /// A body's fields: the token (field 1), a second string (field 2: platform, reason or topic), a third
    /// (field 3: app id), and a number (field `varintField`: via or through seq). A string that is `nil` is
    /// not written; one that is set is written even when empty (the `optional` fields), so a caller leaves
    /// a plain proto3 string `nil` when it is empty.
    private struct BodyFields {
        var token = ""
        var second: String?
        var third: String?
        var varintField: UInt64 = 0
        var varint: UInt64 = 0

        var size: Int {
            fieldSize(string: token) + fieldSize(present: second) + fieldSize(present: third)
                + fieldSize(varint: varint)
        }

        func append(to bytes: inout [UInt8]) {
            if !token.isEmpty { appendStringField(1, token, to: &bytes) }
            if let second { appendStringField(2, second, to: &bytes) }
            if let third { appendStringField(3, third, to: &bytes) }
            if varint != 0 { appendVarintField(varintField, varint, to: &bytes) }
        }
    }
}

extension Array where Element == UInt8 {
    /// Makes room for `count` more bytes, growing geometrically: `reserveCapacity` alone allocates exactly
    /// what it is asked for, so calling it before each of many appends to one buffer (a request's records)
    /// would copy the buffer every time.
    mutating func reserveRoom(for count: Int) {
        let needed = self.count + count
        if capacity < needed { reserveCapacity(Swift.max(needed, capacity * 2)) }
    }
}

/// The bytes of a varint field (tag of one byte), or 0 for the default value, which is not written.
private func fieldSize(varint value: UInt64) -> Int { value == 0 ? 0 : 1 + varintSize(value) }

/// The bytes of a string field (tag of one byte), or 0 for the empty string, which is not written.
private func fieldSize(string: String) -> Int {
    let count = string.utf8.count
    return count == 0 ? 0 : 1 + varintSize(UInt64(count)) + count
}

/// The bytes of a string field that is written whenever it is set.
private func fieldSize(present text: String?) -> Int {
    guard let count = text?.utf8.count else { return 0 }
    return 1 + varintSize(UInt64(count)) + count
}

private func varintSize(_ value: UInt64) -> Int { value == 0 ? 1 : (64 - value.leadingZeroBitCount + 6) / 7 }

private func appendVarint(_ value: UInt64, to bytes: inout [UInt8]) {
    var value = value
    while value >= 0x80 {
        bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
        value >>= 7
    }
    bytes.append(UInt8(value))
}

private func appendVarintField(_ field: UInt64, _ value: UInt64, to bytes: inout [UInt8]) {
    appendVarint(field << 3, to: &bytes)
    appendVarint(value, to: &bytes)
}

private func appendStringField(_ field: UInt64, _ text: String, to bytes: inout [UInt8]) {
    appendVarint(field << 3 | 2, to: &bytes)
    appendVarint(UInt64(text.utf8.count), to: &bytes)
    bytes.append(contentsOf: text.utf8)
}

extension SubscriptionChannel {
    /// The `Via` enum's number in the schema.
    fileprivate var wireValue: UInt64 {
        switch self {
        case .client: 1
        case .v1: 2
        case .iid: 3
        }
    }
}
