/// The forms in which identifiers being erased may be written inside a message's content, and the rewriting
/// that puts the same form of each one's replacement in their place (docs/compliance.md, "Erasure").
///
/// For an identifier's bytes `I` and its replacement `R`, each form of `I` is replaced by the same form of `R`:
///
/// | form | example for `I` = `ab:c` |
/// |---|---|
/// | the bytes themselves | `ab:c` |
/// | hex, lowercase and uppercase | `61623a63`, `61623A63` |
/// | base64, standard alphabet, padded and unpadded | `YWI6Yw==`, `YWI6Yw` |
/// | base64url, padded and unpadded | `YWI6Yw==`, `YWI6Yw` |
/// | percent-encoding (RFC 3986: all but `A–Z a–z 0–9 - . _ ~`), `%XX` upper and lowercase | `ab%3Ac`, `ab%3ac` |
/// | percent-encoding of the standard base64, padded and unpadded (`+ / =` as `%2B %2F %3D`) | `YWI6Yw%3D%3D` |
///
/// Each form is searched for anywhere in the bytes, so it is found as a JSON string value, inside a URL, or
/// inside longer text. What is *not* found: a base64 encoding of a longer value that holds the identifier
/// (its digits depend on the identifier's offset in that value), any other encoding (JSON `\u` escapes are
/// not one: the server stores the JSON it re-encodes, with none for these characters), and hashes of the
/// identifier.
///
/// When two forms are the same bytes (base64 and base64url with no `+` or `/`; percent-encoding of text that
/// needs none) the form listed first above decides the replacement.
///
/// ```swift
/// var encodings = IdentifierEncodings()
/// encodings.add(Array(token.rawValue.utf8), replacedBy: Array(pseudonym.rawValue.utf8), owner: 0)
/// if let rewrite = encodings.rewrite(messageJSON) { messageJSON = rewrite.bytes }
/// ```
///
/// - Important: The needles are identifiers (secrets). Never log them or the bytes they are searched in.
public struct IdentifierEncodings: Sendable {
    /// One form of one identifier: the bytes searched for, what replaces them, and whose they are.
    public struct Form: Sendable, Equatable {
        public let needle: [UInt8]
        public let replacement: [UInt8]
        /// The caller's number for the identifier's owner (an erasure's target index).
        public let owner: Int
    }

    /// Every form added, the longest needle first (so that a padded base64 is replaced whole, not as its
    /// unpadded prefix).
    public private(set) var forms: [Form] = []

    public init() {}

    /// Adds every form of `identifier`, each to be replaced by the same form of `replacement`.
    ///
    /// - Parameters:
    ///   - owner: reported by ``rewrite(_:)`` when a form of `identifier` is found.
    ///   - binary: `identifier` is binary (an APNs token): its bytes themselves are not a form — text does not hold
    ///     them, and 16 bytes that happen to spell `"notification":{` would otherwise rewrite every message.
    ///   - shortest: forms shorter than this are not searched for: a short identifier (a token `ledger import`
    ///     took) would match inside unrelated text.
    public mutating func add(
        _ identifier: [UInt8], replacedBy replacement: [UInt8], owner: Int, binary: Bool = false,
        shortest: Int = Self.shortestNeedle
    ) {
        guard !identifier.isEmpty else { return }
        var seen = Set(forms.map(\.needle))
        for (position, (needle, replaced)) in zip(Self.encodings(of: identifier), Self.encodings(of: replacement))
            .enumerated()
        where !(binary && position == 0) && needle.count >= shortest && seen.insert(needle).inserted {
            forms.append(Form(needle: needle, replacement: replaced, owner: owner))
        }
        forms.sort { $0.needle.count > $1.needle.count }
    }

    /// Every needle: what a search for these identifiers in stored bytes looks for.
    public var needles: [[UInt8]] { forms.map(\.needle) }

    /// Whether a form of an identifier occurs in `bytes`.
    public func occurs(in bytes: UnsafeRawBufferPointer) -> Bool {
        forms.contains { ByteSearch.contains(bytes, $0.needle) }
    }

    /// Whether a form of an identifier occurs in `bytes`.
    public func occurs(in bytes: [UInt8]) -> Bool { bytes.withUnsafeBytes { occurs(in: $0) } }

    /// `bytes` with every form of every identifier replaced, in one pass from the start (at each offset the
    /// longest needle found wins; a replacement is never searched again), and the owners of those found; `nil`
    /// when none occurs.
    public func rewrite(_ bytes: [UInt8]) -> (bytes: [UInt8], owners: Set<Int>)? {
        // A scan per needle with memchr first: most contents name no identifier at all.
        let present = bytes.withUnsafeBytes { buffer in forms.filter { ByteSearch.contains(buffer, $0.needle) } }
        guard !present.isEmpty else { return nil }
        var result: [UInt8] = []
        result.reserveCapacity(bytes.count)
        var owners = Set<Int>()
        var index = 0
        outer: while index < bytes.count {
            for form in present where Self.matches(form.needle, in: bytes, at: index) {
                result += form.replacement
                owners.insert(form.owner)
                index += form.needle.count
                continue outer
            }
            result.append(bytes[index])
            index += 1
        }
        return (result, owners)
    }

    /// Whether `needle` is at `offset` of `bytes`.
    private static func matches(_ needle: [UInt8], in bytes: [UInt8], at offset: Int) -> Bool {
        guard needle.count <= bytes.count - offset else { return false }
        for position in 0..<needle.count where bytes[offset + position] != needle[position] { return false }
        return true
    }

    /// The shortest form searched for by default: 16 characters, shorter than any token the server issues or any APNs
    /// token in hex or base64, longer than a word.
    public static let shortestNeedle = 16

    /// The forms of `bytes`, in the order of the table above (the same order for every value, so that the
    /// forms of an identifier and of its replacement pair up).
    public static func encodings(of bytes: [UInt8]) -> [[UInt8]] {
        let lowerHex = Array(Hex.encode(bytes).utf8)
        let upperHex = lowerHex.map { (97...102).contains($0) ? $0 - 32 : $0 }
        let standard = Base64Text.encode(bytes, alphabet: .standard, padded: true)
        let standardUnpadded = Base64Text.encode(bytes, alphabet: .standard, padded: false)
        return [
            bytes, lowerHex, upperHex, standard, standardUnpadded,
            Base64Text.encode(bytes, alphabet: .url, padded: true),
            Base64Text.encode(bytes, alphabet: .url, padded: false),
            percentEncoded(bytes, uppercase: true), percentEncoded(bytes, uppercase: false),
            percentEncoded(standard, uppercase: true), percentEncoded(standard, uppercase: false),
            percentEncoded(standardUnpadded, uppercase: true), percentEncoded(standardUnpadded, uppercase: false),
        ]
    }

    /// `bytes` percent-encoded as in a URL's query (RFC 3986 §2.3: only unreserved bytes left as they are).
    public static func percentEncoded(_ bytes: [UInt8], uppercase: Bool) -> [UInt8] {
        let digits = Array((uppercase ? "0123456789ABCDEF" : "0123456789abcdef").utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        for byte in bytes {
            if isUnreserved(byte) {
                out.append(byte)
            } else {
                out += [UInt8(ascii: "%"), digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]]
            }
        }
        return out
    }

    /// `A–Z a–z 0–9 - . _ ~`.
    static func isUnreserved(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
            UInt8(ascii: "~"):
            true
        default: false
        }
    }
}
