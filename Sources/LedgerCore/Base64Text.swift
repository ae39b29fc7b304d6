/// Base64 (RFC 4648 §4) and base64url (§5), as erasure looks for identifiers in text: encoding in either
/// alphabet with or without padding, and a lenient decoding that takes both alphabets and optional padding.
///
/// Foundation's `Data.base64EncodedString()` has no URL alphabet and no unpadded form; erasure needs all four.
public enum Base64Text {
    /// The two alphabets: they differ only in the last two digits (`+/` against `-_`).
    public enum Alphabet: Sendable {
        case standard
        case url

        fileprivate var digits: [UInt8] {
            switch self {
            case .standard: Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
            case .url: Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
            }
        }
    }

    /// `bytes` encoded in `alphabet`, `=`-padded to a multiple of four characters when `padded`.
    ///
    /// ```swift
    /// Base64Text.encode(Array("ab?".utf8), alphabet: .url, padded: false)  // "YWI_"
    /// ```
    public static func encode(_ bytes: some Collection<UInt8>, alphabet: Alphabet, padded: Bool) -> [UInt8] {
        let digits = alphabet.digits
        let input = Array(bytes)
        var out: [UInt8] = []
        out.reserveCapacity((input.count + 2) / 3 * 4)
        var index = 0
        while index < input.count {
            let count = min(3, input.count - index)
            let b0 = UInt32(input[index])
            let b1 = count > 1 ? UInt32(input[index + 1]) : 0
            let b2 = count > 2 ? UInt32(input[index + 2]) : 0
            let group = b0 << 16 | b1 << 8 | b2
            for position in 0..<(count + 1) {
                out.append(digits[Int((group >> UInt32(18 - 6 * position)) & 0x3F)])
            }
            if padded { out.append(contentsOf: repeatElement(UInt8(ascii: "="), count: 3 - count)) }
            index += 3
        }
        return out
    }

    /// The bytes `text` encodes, in either alphabet (or a mix), padded or not; `nil` when it is not base64 (a
    /// character outside both alphabets, padding before the end, or a length that leaves one digit over).
    ///
    /// Lenient on purpose: it looks for what a person may have pasted, not for canonical encodings.
    public static func decode(_ text: some Collection<UInt8>) -> [UInt8]? {
        var digits = Array(text)
        while digits.last == UInt8(ascii: "=") { digits.removeLast() }
        guard digits.count % 4 != 1 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(digits.count * 3 / 4)
        var group: UInt32 = 0
        var held = 0
        for digit in digits {
            guard let value = value(ofDigit: digit) else { return nil }
            group = group << 6 | UInt32(value)
            held += 6
            if held >= 8 {
                held -= 8
                out.append(UInt8(truncatingIfNeeded: group >> UInt32(held)))
            }
        }
        return out
    }

    /// The value of one digit of either alphabet, or `nil`.
    public static func value(ofDigit digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): digit - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): digit - UInt8(ascii: "a") + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0") + 52
        case UInt8(ascii: "+"), UInt8(ascii: "-"): 62
        case UInt8(ascii: "/"), UInt8(ascii: "_"): 63
        default: nil
        }
    }
}
