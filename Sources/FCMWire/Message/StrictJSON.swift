import LedgerCore

/// The checks a request body gets before it is decoded, which Foundation's JSON readers do not make:
/// `JSONSerialization` (and `JSONDecoder`) accept UTF-16 and UTF-32 bodies and a byte-order mark, and keep
/// one of two equal keys without a word — so `{"message":{…},"message":{…}}` would be validated as one
/// message and stored as another reader might see it. RFC 8259 requires UTF-8 for JSON exchanged between
/// systems and says names within an object should be unique; Google's APIs refuse both. No library among
/// the project's dependencies reports duplicate names, so this scanner is written by hand: it walks the
/// bytes once, tracking only strings and the nesting of objects, and leaves syntax to the decoder.
public enum StrictJSON {
    /// What is wrong with `bytes` as a request body, or `nil`.
    public static func problem(in bytes: some Collection<UInt8>) -> String? {
        if let answer = bytes.withContiguousStorageIfAvailable({ problem(inContiguous: $0) }) { return answer }
        return Array(bytes).withUnsafeBufferPointer { problem(inContiguous: $0) }
    }

    private static func problem(inContiguous bytes: UnsafeBufferPointer<UInt8>) -> String? {
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) {
            return "the body starts with a byte-order mark; send UTF-8 without one"
        }
        if bytes.contains(0) || String(validating: bytes, as: UTF8.self) == nil {
            return "the body is not UTF-8"
        }
        return duplicateKey(in: bytes).map { "the key \"\($0)\" appears twice in one object" }
    }

    private enum Container {
        case object(keys: Set<[UInt8]>, expectingKey: Bool)
        case array
    }

    /// The first name that occurs twice in one object (escapes decoded, so `"a"` and `"\u0061"` are equal).
    static func duplicateKey(in bytes: UnsafeBufferPointer<UInt8>) -> String? {
        var stack: [Container] = []
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "{"): stack.append(.object(keys: [], expectingKey: true))
            case UInt8(ascii: "["): stack.append(.array)
            case UInt8(ascii: "}"), UInt8(ascii: "]"): _ = stack.popLast()
            case UInt8(ascii: ","), UInt8(ascii: ":"):
                if case .object(let keys, _) = stack.last {
                    stack[stack.count - 1] = .object(keys: keys, expectingKey: byte == UInt8(ascii: ","))
                }
            case UInt8(ascii: "\""):
                guard case .object(var keys, true) = stack.last else {
                    // A value: only where it ends matters (decoding a batchAdd body's 1000 tokens here was
                    // 5 % of the server's samples under load).
                    index = endOfString(bytes, from: index + 1)
                    break
                }
                let (string, end) = readString(bytes, from: index + 1)
                guard keys.insert(string).inserted else { return String(decoding: string, as: UTF8.self) }
                stack[stack.count - 1] = .object(keys: keys, expectingKey: false)
                index = end
            default: break
            }
            index += 1
        }
        return nil
    }

    /// The index of the closing quote of the string starting at `start` (after its opening quote), or the end:
    /// where ``readString(_:from:)`` stops, without decoding.
    private static func endOfString(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int {
        var index = start
        while index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: "\""): return index
            case UInt8(ascii: "\\"): index += 2
            default: index += 1
            }
        }
        return bytes.count
    }

    /// The decoded bytes of the string starting at `start` (after its opening quote) and the index of its
    /// closing quote (or the end).
    private static func readString(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> ([UInt8], Int) {
        var result: [UInt8] = []
        var index = start
        var pendingHighSurrogate: UInt32?
        while index < bytes.count && bytes[index] != UInt8(ascii: "\"") {
            guard bytes[index] == UInt8(ascii: "\\"), index + 1 < bytes.count else {
                result.append(bytes[index])
                index += 1
                continue
            }
            let escape = bytes[index + 1]
            index += 2
            if escape == UInt8(ascii: "u"), index + 4 <= bytes.count,
                let unit = UInt32(String(decoding: bytes[index..<index + 4], as: UTF8.self), radix: 16)
            {
                index += 4
                var scalar: Unicode.Scalar?
                if (0xD800..<0xDC00).contains(unit) {
                    pendingHighSurrogate = unit
                    continue
                } else if (0xDC00..<0xE000).contains(unit), let high = pendingHighSurrogate {
                    scalar = Unicode.Scalar(0x10000 + ((high - 0xD800) << 10) + (unit - 0xDC00))
                } else {
                    scalar = Unicode.Scalar(unit)
                }
                pendingHighSurrogate = nil
                result.append(contentsOf: Array(String(scalar.map(Character.init) ?? "\u{FFFD}").utf8))
                continue
            }
            let decoded: UInt8 =
                switch escape {
                case UInt8(ascii: "n"): 0x0A
                case UInt8(ascii: "t"): 0x09
                case UInt8(ascii: "r"): 0x0D
                case UInt8(ascii: "b"): 0x08
                case UInt8(ascii: "f"): 0x0C
                default: escape  // \" \\ \/
                }
            result.append(decoded)
        }
        return (result, index)
    }
}
