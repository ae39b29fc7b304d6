import Crypto

/// The hashed form of a sealed event whose one sealed value is its registration token, fed to a hasher straight
/// from the event's stored bytes with the token's place patched: `registered`, `unregistered`, `subscribed`,
/// `unsubscribed`, `acknowledged`, `apns_token_cleared` and `live_activity_unfollowed`, the kinds of nearly every
/// append.
///
/// The bytes are those of ``EventCodec/appendHashedForm(of:to:)`` (docs/event-format.md, "Sealed fields"): the
/// version byte and the header fields as stored; the body's tag; the body's new length; the token field holding the
/// 64 hex digits of the commitment; the body's other fields as stored; no seals. Why by hand: building the hashed
/// view (a copy of the event, a new token string) and encoding it a second time was half of sealing's cost on the
/// appender (a bulk import's profile, 2026-12-06). A test holds both paths equal for every kind, held and forgotten.
enum SealedTokenForm {
    /// Feeds `hasher` the hashed form of `encoded`, a version-3 event in its canonical encoding sealed by `seals`,
    /// and answers true; false, with `hasher` untouched, for any other event (the caller takes the general path).
    static func update(_ hasher: inout SHA256, encoded: UnsafeRawBufferPointer, seals: [Seal]) -> Bool {
        guard seals.count == 1, encoded.count > 1, encoded[0] == EventCodec.sealedVersion else { return false }
        let message = UnsafeRawBufferPointer(rebasing: encoded[1...])
        var reader = WireReader(message)
        // The header (fields 1-4), up to the body's key.
        var bodyField: UInt64 = 0
        while bodyField == 0 {
            guard let (field, wireType) = reader.key() else { return false }
            if field >= 10 {
                // The kinds whose only sealed value is the token, their field 1.
                switch field {
                case 10, 11, 12, 13, 16, 18, 23: break
                default: return false
                }
                guard wireType == 2 else { return false }
                bodyField = field
            } else {
                guard field <= 4, reader.skipOrRead(wireType: wireType, keep: false) else { return false }
            }
        }
        let bodyLengthStart = reader.position
        guard let body = reader.lengthDelimited() else { return false }
        // The token: the body's first field (1, length-delimited), never empty in a sealed event.
        var bodyReader = WireReader(body)
        guard let (tokenField, tokenWireType) = bodyReader.key(), tokenField == 1, tokenWireType == 2,
            let token = bodyReader.lengthDelimited(), !token.isEmpty
        else { return false }
        let rest = UnsafeRawBufferPointer(rebasing: body[bodyReader.position...])
        let seal = seals[0]
        if let key = seal.key {
            guard key.count <= Seal.hmacBlock else { return false }
            let digest = Seal.commitmentDigest(key: key, value: token)
            digest.withUnsafeBytes { commitment in
                update(&hasher, encoded: encoded, through: 1 + bodyLengthStart, commitment: commitment, rest: rest)
            }
        } else {
            guard let commitment = seal.commitment, commitment.count == Seal.size else { return false }
            commitment.withUnsafeBytes { commitment in
                update(&hasher, encoded: encoded, through: 1 + bodyLengthStart, commitment: commitment, rest: rest)
            }
        }
        return true
    }

    /// Feeds `hasher` `encoded` up to `end` (the version byte, the header, the body's key), then the body's length,
    /// the token field holding `commitment`'s hex digits, and `rest` (the body's other fields).
    private static func update(
        _ hasher: inout SHA256, encoded: UnsafeRawBufferPointer, through end: Int, commitment: UnsafeRawBufferPointer,
        rest: UnsafeRawBufferPointer
    ) {
        // The token field as the hashed form holds it: key 0x0A, length 64, the hex digits.
        let tokenFieldSize = 2 + 2 * Seal.size
        hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: encoded[..<end]))
        withUnsafeTemporaryAllocation(byteCount: 10 + tokenFieldSize, alignment: 1) { buffer in
            var count = 0
            var length = UInt64(tokenFieldSize + rest.count)
            while length >= 0x80 {
                buffer[count] = UInt8(truncatingIfNeeded: length) | 0x80
                length >>= 7
                count += 1
            }
            buffer[count] = UInt8(length)
            count += 1
            buffer[count] = 0x0A
            buffer[count + 1] = UInt8(2 * Seal.size)
            count += 2
            let digits: StaticString = "0123456789abcdef"
            digits.withUTF8Buffer { digits in
                for byte in commitment {
                    buffer[count] = digits[Int(byte >> 4)]
                    buffer[count + 1] = digits[Int(byte & 0xF)]
                    count += 2
                }
            }
            hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(buffer)[..<count]))
        }
        hasher.update(bufferPointer: rest)
    }
}
