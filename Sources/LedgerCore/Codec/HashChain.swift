import Crypto

/// The log's hash chain: `hash = SHA-256(prevHash ‖ hashedForm)`, with 32 zero bytes before seq 1, where the
/// hashed form of a sealed event (encoding version 3) has each sealed value replaced by its commitment
/// (``EventCodec/appendHashedForm(of:to:)``), and that of an older event (version 1) is its encoding.
///
/// A stored record is `hash ‖ encodedEvent`, so every record carries its own hash and the chain can be
/// checked by reading the log once in order.
public enum HashChain {
    public static let hashSize = 32
    /// The `prevHash` of the first event.
    public static let genesis = [UInt8](repeating: 0, count: hashSize)

    /// The hash a record holding `encodedEvent` must carry after `previous`: over its hashed form when it is sealed
    /// (`decoded`, when given, is the event those bytes decode to, so they are not decoded again), over its bytes
    /// when it is of version 1; `nil` for a record an erasure rewrote under version 2, whose hash is over bytes no
    /// longer stored.
    ///
    /// - Throws: `.corruptEvent` for a sealed event that does not decode, is not in its canonical encoding, or whose
    ///   seals do not match it.
    public static func recomputedHash(
        previous: some Sequence<UInt8>, encodedEvent: UnsafeRawBufferPointer, decoded: LedgerEvent? = nil
    ) throws(LedgerCoreError) -> [UInt8]? {
        switch encodedEvent.first {
        case EventCodec.redactedVersion: return nil
        case EventCodec.sealedVersion:
            let event: LedgerEvent
            if let decoded { event = decoded } else { event = try EventCodec.decode(encodedEvent) }
            // The hash covers the hashed form, made from the decoded event: only bytes that are that event's
            // canonical encoding are covered whole (an unknown field, a repeated one or another order would be
            // bytes no hash binds, and a reader that keeps them would hash otherwise: tools/merkle/sealed_form.py).
            guard EventCodec.encode(event).elementsEqual(encodedEvent) else {
                throw LedgerCoreError(.corruptEvent, "event \(event.seq) is sealed but not in its canonical encoding")
            }
            var hasher = SHA256()
            hasher.update(data: Array(previous))
            if let seals = event.seals, SealedTokenForm.update(&hasher, encoded: encodedEvent, seals: seals) {
                return Array(hasher.finalize())
            }
            var form: [UInt8] = []
            guard EventCodec.appendHashedForm(of: event, to: &form) else {
                throw LedgerCoreError(.corruptEvent, "event \(event.seq) is sealed but its seals do not match it")
            }
            return form.withUnsafeBytes { hash(previous: previous, encodedEvent: $0) }
        default: return hash(previous: previous, encodedEvent: encodedEvent)
        }
    }

    /// SHA-256 of `previous ‖ encodedEvent`: the hash of an event of version 1, or of a hashed form.
    public static func hash(previous: some Sequence<UInt8>, encodedEvent: UnsafeRawBufferPointer) -> [UInt8] {
        var hasher = SHA256()
        hasher.update(data: Array(previous))
        hasher.update(bufferPointer: encodedEvent)
        return Array(hasher.finalize())
    }

    /// Appends the stored record of `event` (``record(hash:encodedEvent:)``) to `record`, and replaces
    /// `previous` — the hash it follows — with the event's hash. The appender's path: the event is encoded
    /// after room for the hash, hashed in place, and the hash written in front; with `record` a buffer the
    /// caller empties and reuses, and `previous` uniquely held, nothing is allocated.
    public static func appendRecord(
        of event: LedgerEvent, chainingFrom previous: inout [UInt8], to record: inout [UInt8]
    ) {
        let start = record.count
        record.append(contentsOf: repeatElement(0, count: hashSize))
        EventCodec.append(event, to: &record)
        var hasher = SHA256()
        hasher.update(data: previous)
        record.withUnsafeBytes {
            let encoded = UnsafeRawBufferPointer(rebasing: $0[(start + hashSize)...])
            guard let seals = event.seals else { return hasher.update(bufferPointer: encoded) }
            if SealedTokenForm.update(&hasher, encoded: encoded, seals: seals) { return }
            var form: [UInt8] = []
            let sealed = EventCodec.appendHashedForm(of: event, to: &form)
            // The appender gives every sealed event one seal per sealed value (``EventSealer``).
            assert(sealed, "event \(event.seq) has seals that do not match it")
            if sealed { hasher.update(data: form) } else { hasher.update(bufferPointer: encoded) }
        }
        let digest = hasher.finalize()
        digest.withUnsafeBytes { digest in
            record.withUnsafeMutableBytes {
                ($0.baseAddress! + start).copyMemory(from: digest.baseAddress!, byteCount: hashSize)
            }
            if previous.count != hashSize { previous = [UInt8](repeating: 0, count: hashSize) }
            previous.withUnsafeMutableBytes { $0.copyMemory(from: digest) }
        }
    }

    /// The stored record for `encodedEvent`: its hash followed by the event.
    public static func record(hash: [UInt8], encodedEvent: [UInt8]) -> [UInt8] {
        hash + encodedEvent
    }

    /// Splits a stored record into its hash and its encoded event.
    ///
    /// - Throws: `.corruptEvent` when the record is too short to hold a hash and an event.
    public static func split(record: UnsafeRawBufferPointer) throws(LedgerCoreError)
        -> (hash: UnsafeRawBufferPointer, encodedEvent: UnsafeRawBufferPointer)
    {
        guard record.count > hashSize else {
            throw LedgerCoreError(.corruptEvent, "record of \(record.count) bytes is shorter than a hash and an event")
        }
        return (
            UnsafeRawBufferPointer(rebasing: record[..<hashSize]),
            UnsafeRawBufferPointer(rebasing: record[hashSize...])
        )
    }
}

extension Sequence<UInt8> {
    /// Lowercase hexadecimal.
    public var hexString: String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for byte in self {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0xF)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
