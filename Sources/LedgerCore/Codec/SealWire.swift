/// The wire form of an event's seals: field 30 of `Event`, once per sealed value, each a `Seal` message
/// (`bytes key = 1`, `bytes commitment = 2`, `string forgotten = 3`; ledger_event.proto). Written after the body,
/// the last field, so that the bytes stay the canonical encoding (fields in number order).
///
/// By hand: the seals are read on every decode of a version-3 record, including `rebuild`'s and the replica's,
/// which read every other common field by hand too (``CanonicalEventDecoder``).
enum SealWire {
    /// Field 30, wire type 2.
    private static let tag: [UInt8] = [0xF2, 0x01]

    /// Appends each seal as field 30.
    static func append(_ seals: [Seal], to bytes: inout [UInt8]) {
        for seal in seals {
            var size = 0
            if let key = seal.key { size += 2 + key.count }
            if let commitment = seal.commitment { size += 2 + commitment.count }
            let forgotten = Array(seal.forgotten.utf8)
            if !forgotten.isEmpty { size += 1 + varintSize(forgotten.count) + forgotten.count }
            bytes.reserveRoom(for: 2 + varintSize(size) + size)
            bytes.append(contentsOf: tag)
            appendVarint(size, to: &bytes)
            // Keys and commitments are 32 bytes: one length byte.
            if let key = seal.key {
                bytes.append(0x0A)
                bytes.append(UInt8(key.count))
                bytes.append(contentsOf: key)
            }
            if let commitment = seal.commitment {
                bytes.append(0x12)
                bytes.append(UInt8(commitment.count))
                bytes.append(contentsOf: commitment)
            }
            if !forgotten.isEmpty {
                bytes.append(0x1A)
                appendVarint(forgotten.count, to: &bytes)
                bytes.append(contentsOf: forgotten)
            }
        }
    }

    /// One `Seal` message; `nil` unless it holds exactly one of a 32-byte key and a 32-byte commitment (a reason
    /// only with the commitment), its fields in order, each once.
    static func seal(_ bytes: UnsafeRawBufferPointer) -> Seal? {
        var reader = WireReader(bytes)
        var key: [UInt8]?
        var commitment: [UInt8]?
        var forgotten = ""
        var lastField: UInt64 = 0
        while !reader.isAtEnd {
            guard let (field, wireType) = reader.key(), field > lastField, wireType == 2 else { return nil }
            lastField = field
            switch field {
            case 1: guard let value = reader.lengthDelimited() else { return nil }; key = Array(value)
            case 2: guard let value = reader.lengthDelimited() else { return nil }; commitment = Array(value)
            case 3:
                guard let value = reader.lengthDelimited(), let text = String(validating: value, as: UTF8.self)
                else { return nil }
                forgotten = text
            default: return nil
            }
        }
        switch (key, commitment) {
        case (let key?, nil) where key.count == Seal.size && forgotten.isEmpty: return Seal(key: key)
        case (nil, let commitment?) where commitment.count == Seal.size:
            return Seal(commitment: commitment, forgotten: forgotten)
        default: return nil
        }
    }

    /// The seals of an encoded event (after its version byte), read from its top-level fields 30 whatever the
    /// order of the others: the path beside SwiftProtobuf's, for bytes ``CanonicalEventDecoder`` defers.
    ///
    /// - Throws: `.corruptEvent` for bytes that do not parse, or a seal that is not valid.
    static func seals(in bytes: UnsafeRawBufferPointer) throws(LedgerCoreError) -> [Seal] {
        var reader = WireReader(bytes)
        var seals: [Seal] = []
        while !reader.isAtEnd {
            guard let (field, wireType) = reader.key(), reader.skipOrRead(wireType: wireType, keep: field == 30)
            else { throw LedgerCoreError(.corruptEvent, "a sealed event does not parse") }
            guard field == 30 else { continue }
            guard wireType == 2, let value = reader.lastValue, let seal = seal(value) else {
                throw LedgerCoreError(.corruptEvent, "a sealed event holds a seal that is not valid")
            }
            seals.append(seal)
        }
        return seals
    }

    private static func varintSize(_ value: Int) -> Int {
        var size = 1
        var rest = value >> 7
        while rest > 0 {
            size += 1
            rest >>= 7
        }
        return size
    }

    private static func appendVarint(_ value: Int, to bytes: inout [UInt8]) {
        var value = UInt64(value)
        while value >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }
}
