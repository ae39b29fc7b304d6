/// A fast path for decoding the events a log holds most of: `registered`, `unregistered`, `subscribed`,
/// `unsubscribed` and `acknowledged`, in exactly the canonical encoding ``EventCodec/encode(_:)`` writes.
///
/// Why by hand: decoding through SwiftProtobuf builds a message object and then our value, and was a third
/// of `rebuild`'s time (docs/performance.md). This reads the wire format straight into a ``LedgerEvent``.
///
/// It never decides anything SwiftProtobuf would decide differently: it accepts only fields in strictly
/// increasing order, each once, with the wire types of the schema, at most one body, valid UTF-8 and known
/// enum values, and answers `nil` for anything else — another kind, an unknown field, a repeated or
/// out-of-order field, a bad enum. The caller then decodes with SwiftProtobuf, which accepts or rejects
/// those bytes by the full rules. A property test checks both paths agree on random events and mutations.
package enum CanonicalEventDecoder {
    /// Decodes `bytes` (the protobuf message, after the format-version byte), or `nil` to defer. With `sealed`
    /// (encoding version 3), the seals that follow the body (field 30, repeated) are read too, and must be as many
    /// as the body's sealed values; without it, a seal defers.
    package static func decode(_ bytes: UnsafeRawBufferPointer, sealed: Bool = false) -> LedgerEvent? {
        var reader = WireReader(bytes)
        var seq: UInt64 = 0
        var micros: Int64 = 0
        var actor = ""
        var requestID = ""
        var body: LedgerEvent.Body?
        var seals: [Seal] = []
        var lastField: UInt64 = 0
        while !reader.isAtEnd {
            guard let (field, wireType) = reader.key(), field > lastField || (field == 30 && lastField == 30) else {
                return nil
            }
            lastField = field
            switch (field, wireType) {
            case (1, 0): guard let value = reader.varint() else { return nil }; seq = value
            case (2, 0): guard let value = reader.varint() else { return nil }; micros = Int64(bitPattern: value)
            case (3, 2): guard let value = reader.string() else { return nil }; actor = value
            case (4, 2): guard let value = reader.string() else { return nil }; requestID = value
            case (10...13, 2), (16, 2):
                guard body == nil, let message = reader.lengthDelimited(), let decoded = Self.body(field, message)
                else { return nil }
                body = decoded
            case (30, 2) where sealed:
                guard let message = reader.lengthDelimited(), let seal = SealWire.seal(message) else { return nil }
                seals.append(seal)
            default: return nil
            }
        }
        guard let body, !sealed || seals.count == body.sealedValueCount else { return nil }
        return LedgerEvent(
            seq: seq, time: LedgerTime(microseconds: micros), actor: actor, requestID: requestID, body: body,
            seals: sealed ? seals : nil)
    }

    private static func body(_ field: UInt64, _ bytes: UnsafeRawBufferPointer) -> LedgerEvent.Body? {
        var reader = WireReader(bytes)
        var token = ""
        var second: String?  // platform, topic or reason
        var third: String?  // app id
        var number: UInt64 = 0  // via or through seq
        var lastField: UInt64 = 0
        while !reader.isAtEnd {
            guard let (inner, wireType) = reader.key(), inner > lastField else { return nil }
            lastField = inner
            switch (field, inner, wireType) {
            case (_, 1, 2): guard let value = reader.string() else { return nil }; token = value
            case (10...13, 2, 2): guard let value = reader.string() else { return nil }; second = value
            case (10, 3, 2): guard let value = reader.string() else { return nil }; third = value
            case (12...13, 3, 0), (16, 2, 0): guard let value = reader.varint() else { return nil }; number = value
            default: return nil
            }
        }
        let registrationToken = RegistrationToken(trusted: token)
        switch field {
        case 10: return .registered(token: registrationToken, platform: second, appID: third)
        case 11: return .unregistered(token: registrationToken, reason: second ?? "")
        case 12, 13:
            let via: SubscriptionChannel
            switch number {
            case 1: via = .client
            case 2: via = .v1
            case 3: via = .iid
            default: return nil  // unspecified or unknown: SwiftProtobuf's path reports it
            }
            let topic = TopicName(trusted: second ?? "")
            return field == 12
                ? .subscribed(token: registrationToken, topic: topic, via: via)
                : .unsubscribed(token: registrationToken, topic: topic, via: via)
        case 16: return .acknowledged(token: registrationToken, through: number)
        default: return nil
        }
    }
}

/// Reads protobuf wire-format primitives from a buffer; every read answers `nil` past the end.
struct WireReader {
    private let bytes: UnsafeRawBufferPointer
    private var offset = 0

    /// The value ``skipOrRead(wireType:keep:)`` last kept.
    private(set) var lastValue: UnsafeRawBufferPointer?

    init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    /// Reads past a field's value of `wireType` (0, 1, 2 or 5; groups are not used by the schema), keeping a
    /// length-delimited one in ``lastValue`` when `keep`; false when it does not parse.
    mutating func skipOrRead(wireType: UInt8, keep: Bool) -> Bool {
        lastValue = nil
        switch wireType {
        case 0: return varint() != nil
        case 1, 5:
            let size = wireType == 1 ? 8 : 4
            guard bytes.count - offset >= size else { return false }
            offset += size
            return true
        case 2:
            guard let value = lengthDelimited() else { return false }
            if keep { lastValue = value }
            return true
        default: return false
        }
    }

    var isAtEnd: Bool { offset >= bytes.count }

    /// How many bytes have been read.
    var position: Int { offset }

    /// A field key: (field number, wire type).
    mutating func key() -> (UInt64, UInt8)? {
        guard let key = varint(), key >> 3 != 0 else { return nil }
        return (key >> 3, UInt8(key & 7))
    }

    mutating func varint() -> UInt64? {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while offset < bytes.count, shift < 64 {
            let byte = bytes[offset]
            offset += 1
            if shift == 63 && byte > 1 { return nil }  // more than 64 bits
            value |= UInt64(byte & 0x7F) << shift
            if byte & 0x80 == 0 { return value }
            shift += 7
        }
        return nil
    }

    mutating func lengthDelimited() -> UnsafeRawBufferPointer? {
        guard let length = varint(), length <= UInt64(bytes.count - offset) else { return nil }
        let start = offset
        offset += Int(length)
        return UnsafeRawBufferPointer(rebasing: bytes[start..<offset])
    }

    /// An ASCII string (tokens, topics, actors and request ids are); other text defers to SwiftProtobuf,
    /// which validates UTF-8 by the full rules. (`String(validating:)` is generic and slower here.)
    mutating func string() -> String? {
        guard let slice = lengthDelimited() else { return nil }
        let units = slice.assumingMemoryBound(to: UInt8.self)
        var combined: UInt8 = 0
        for unit in units { combined |= unit }
        guard combined < 0x80 else { return nil }
        return String(decoding: units, as: UTF8.self)
    }
}
