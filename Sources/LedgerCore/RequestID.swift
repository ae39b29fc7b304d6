/// The id that ties the events of one request together (`requestId`, SPEC §2): a random (version 4) UUID in
/// lowercase, as `UUID().uuidString.lowercased()` spelled it.
///
/// Made from the kernel's random numbers (`getrandom(2)`, `/dev/urandom`) because Foundation's `UUID()` opens, reads
/// and closes `/dev/urandom` on every call there: 3.3 µs against 0.66 µs, measured in a loop of 200,000
/// (release build), a few per cent of a per-token subscribe; read through
/// ``PooledSystemRandomNumberGenerator``, one system call per 256 ids rather than two per id.
public enum RequestID {
    private static let digits = Array("0123456789abcdef".utf8)

    public static func random() -> String {
        var generator = PooledSystemRandomNumberGenerator()
        return random(using: &generator)
    }

    /// A version 4 UUID from `generator`'s 122 bits (the version and variant take the other 6).
    public static func random(using generator: inout some RandomNumberGenerator) -> String {
        let high = (generator.next() as UInt64) & ~0xF000 | 0x4000
        let low = (generator.next() as UInt64) & ~(0xC000 << 48) | (0x8000 << 48)
        return String(unsafeUninitializedCapacity: 36) { buffer in
            var index = 0
            func append(_ value: UInt64, digitCount: Int) {
                for shift in stride(from: (digitCount - 1) * 4, through: 0, by: -4) {
                    buffer[index] = digits[Int(truncatingIfNeeded: (value >> UInt64(shift)) & 0xF)]
                    index += 1
                }
            }
            func hyphen() {
                buffer[index] = UInt8(ascii: "-")
                index += 1
            }
            append(high >> 32, digitCount: 8)
            hyphen()
            append(high >> 16, digitCount: 4)
            hyphen()
            append(high, digitCount: 4)
            hyphen()
            append(low >> 48, digitCount: 4)
            hyphen()
            append(low, digitCount: 12)
            return index
        }
    }
}
