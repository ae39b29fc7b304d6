#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

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

    /// Every form added, in the order added; `index` holds the same needles at the same positions.
    private var added: [Form] = []
    /// Every needle added, searched for all at once (``NeedleIndex``): a position per form of `added`.
    private var index = NeedleIndex()
    /// The needles added, for the duplicate check (made once: an erasure may add tens of thousands of forms).
    private var seen: Set<[UInt8]> = []

    /// Every form added, the longest needle first (so that a padded base64 is replaced whole, not as its
    /// unpadded prefix); of needles as long, the one added first first.
    public var forms: [Form] {
        added.indices.sorted { added[$0].needle.count > added[$1].needle.count || (added[$0].needle.count == added[$1].needle.count && $0 < $1) }
            .map { added[$0] }
    }

    public init() {}

    /// Adds every form of `identifier`, each to be replaced by the same form of `replacement`.
    ///
    /// - Parameters:
    ///   - owner: reported by ``rewrite(_:)`` when a form of `identifier` is found.
    ///   - binary: `identifier` is binary (an APNs token): its bytes themselves are not a form — text does not hold
    ///     them, and 16 bytes that happen to spell `"notification":{` would otherwise rewrite every message.
    ///   - shortest: forms shorter than this are not searched for: a short identifier (a token `ledger import`
    ///     took) would match inside unrelated text.
    ///
    /// Constant time per form, however many were added before (#65: an erasure adds ~12 per APNs token the device
    /// ever held).
    public mutating func add(
        _ identifier: [UInt8], replacedBy replacement: [UInt8], owner: Int, binary: Bool = false,
        shortest: Int = Self.shortestNeedle
    ) {
        guard !identifier.isEmpty else { return }
        for (position, (needle, replaced)) in zip(Self.encodings(of: identifier), Self.encodings(of: replacement))
            .enumerated()
        where !(binary && position == 0) && needle.count >= shortest && seen.insert(needle).inserted {
            added.append(Form(needle: needle, replacement: replaced, owner: owner))
            index.insert(needle)
        }
    }

    /// Every needle: what a search for these identifiers in stored bytes looks for.
    public var needles: [[UInt8]] { forms.map(\.needle) }

    /// Whether a form of an identifier occurs in `bytes`.
    public func occurs(in bytes: UnsafeRawBufferPointer) -> Bool { index.occurs(in: bytes) }

    /// Whether a form of an identifier occurs in `bytes`.
    public func occurs(in bytes: [UInt8]) -> Bool { bytes.withUnsafeBytes { occurs(in: $0) } }

    /// `bytes` with every form of every identifier replaced, in one pass from the start (at each offset the
    /// longest needle found wins; a replacement is never searched again), and the owners of those found; `nil`
    /// when none occurs.
    ///
    /// Linear in `bytes` however many forms there are (``NeedleIndex``), not one scan per form.
    public func rewrite(_ bytes: [UInt8]) -> (bytes: [UInt8], owners: Set<Int>)? {
        var comparisons = 0
        return rewrite(bytes, comparisons: &comparisons)
    }

    /// ``rewrite(_:)``, counting the needles compared with the bytes (what a test asserts is not one per form and
    /// offset).
    package func rewrite(_ bytes: [UInt8], comparisons: inout Int) -> (bytes: [UInt8], owners: Set<Int>)? {
        bytes.withUnsafeBytes { buffer -> (bytes: [UInt8], owners: Set<Int>)? in
            // Most contents name no identifier at all.
            guard index.occurs(in: buffer, comparisons: &comparisons) else { return nil }
            var result: [UInt8] = []
            result.reserveCapacity(bytes.count)
            var owners = Set<Int>()
            var offset = 0
            while offset < buffer.count {
                if let found = index.longest(in: buffer, at: offset, comparisons: &comparisons) {
                    let form = added[found]
                    result += form.replacement
                    owners.insert(form.owner)
                    offset += form.needle.count
                } else {
                    result.append(buffer[offset])
                    offset += 1
                }
            }
            return (result, owners)
        }
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

/// Many byte strings searched for at once, in time linear in the bytes searched rather than in their product with the
/// number of needles (#65: an erasure's forms for thousands of APNs tokens; `verify`'s for thousands of erasures).
///
/// Needles of ``longPrefixLength`` bytes or more are grouped by their first ``longPrefixLength`` bytes, and needles of
/// ``prefixLength`` up to that by their first ``prefixLength``: at each offset of the bytes searched, the bytes there
/// are looked up in a bit filter and then in the groups, and only the needles of a group compared. Shorter needles
/// (none by default: ``IdentifierEncodings/shortestNeedle`` is 16) are compared at every offset. Up to ``fewNeedles``
/// needles, ``occurs(in:)`` searches for each with `memchr` instead (faster for a few).
///
/// The long prefix is what keeps identifiers that share a beginning apart: every erasure pseudonym starts
/// `erased-`, so 8 bytes put all of their base64 forms in one group and their hex forms in 16 (a search compared
/// thousands of needles at each place one occurs), while 24 bytes hold at least 5 of their random hex digits in
/// every form. Identifiers made to share their first 24 bytes (a device choosing its APNs tokens) still share a
/// group: the work is then the number of such needles at each offset where one begins.
///
/// - Important: The needles are identifiers (secrets). Never log them or the bytes they are searched in.
package struct NeedleIndex: Sendable {
    /// The bytes a needle shorter than ``longPrefixLength`` is grouped by.
    package static let prefixLength = 8
    /// The bytes a needle at least this long is grouped by.
    package static let longPrefixLength = 24
    /// Up to this many needles, ``occurs(in:)`` searches for each in turn.
    package static let fewNeedles = 16

    /// The first ``longPrefixLength`` bytes of a needle or of the bytes at an offset.
    private struct LongPrefix: Hashable, Sendable {
        let first: UInt64
        let second: UInt64
        let third: UInt64

        init(_ bytes: UnsafeRawBufferPointer, at offset: Int) {
            first = bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            second = bytes.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self)
            third = bytes.loadUnaligned(fromByteOffset: offset + 16, as: UInt64.self)
        }

        var filterBit: Int {
            NeedleIndex.filterBit(first ^ (second &* 0xC2B2_AE3D_27D4_EB4F) ^ (third &* 0x1656_67B1_9E37_79F9))
        }
    }

    /// Every needle inserted, at the position ``insert(_:)`` returned.
    package private(set) var needles: [[UInt8]] = []
    /// The positions of the needles of at least ``longPrefixLength`` bytes, by their first ``longPrefixLength``
    /// bytes; each group the longest first (of needles as long, the first inserted first).
    private var longGroups: [LongPrefix: [Int]] = [:]
    /// The positions of the needles of ``prefixLength`` bytes up to ``longPrefixLength``, by their first
    /// ``prefixLength`` bytes, ordered as ``longGroups``.
    private var groups: [UInt64: [Int]] = [:]
    /// The positions of the non-empty needles shorter than ``prefixLength``, the longest first.
    private var short: [Int] = []
    /// A bit per hash of a group's prefix (of either length): most offsets are passed over without a dictionary
    /// lookup.
    private var filter = [UInt64](repeating: 0, count: NeedleIndex.filterWords)
    private static let filterWords = 1 << 12  // 2^18 bits, 32 KiB

    package init() {}

    package init(_ needles: some Sequence<[UInt8]>) {
        for needle in needles { insert(needle) }
    }

    package var count: Int { needles.count }

    /// Adds `needle` (an empty one is never found, as with `ByteSearch.contains`);
    /// returns its position.
    @discardableResult
    package mutating func insert(_ needle: [UInt8]) -> Int {
        let position = needles.count
        needles.append(needle)
        guard !needle.isEmpty else { return position }
        if needle.count < Self.prefixLength {
            Self.insert(position, into: &short, of: needles)
        } else if needle.count < Self.longPrefixLength {
            let prefix = needle.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
            Self.insert(position, into: &groups[prefix, default: []], of: needles)
            setFilter(Self.filterBit(prefix))
        } else {
            let prefix = needle.withUnsafeBytes { LongPrefix($0, at: 0) }
            Self.insert(position, into: &longGroups[prefix, default: []], of: needles)
            setFilter(prefix.filterBit)
        }
        return position
    }

    private mutating func setFilter(_ bit: Int) {
        filter[bit >> 6] |= 1 << UInt64(bit & 63)
    }

    private func filterHas(_ bit: Int) -> Bool {
        filter[bit >> 6] & (1 << UInt64(bit & 63)) != 0
    }

    /// `position` into `list` after every needle at least as long.
    private static func insert(_ position: Int, into list: inout [Int], of needles: [[UInt8]]) {
        let length = needles[position].count
        let at = list.firstIndex { needles[$0].count < length } ?? list.endIndex
        list.insert(position, at: at)
    }

    private static func filterBit(_ prefix: UInt64) -> Int {
        Int(truncatingIfNeeded: (prefix &* 0x9E37_79B9_7F4A_7C15) >> 46)  // 18 bits
    }

    /// Whether any needle occurs in `bytes`.
    package func occurs(in bytes: UnsafeRawBufferPointer) -> Bool {
        var comparisons = 0
        return occurs(in: bytes, comparisons: &comparisons)
    }

    /// ``occurs(in:)``, counting the needles compared (a `memchr` search for one counts as one).
    package func occurs(in bytes: UnsafeRawBufferPointer, comparisons: inout Int) -> Bool {
        if needles.count <= Self.fewNeedles {
            for needle in needles {
                comparisons += 1
                if ByteSearch.contains(bytes, needle) { return true }
            }
            return false
        }
        for offset in 0..<bytes.count where longest(in: bytes, at: offset, comparisons: &comparisons) != nil {
            return true
        }
        return false
    }

    /// The position of the longest needle at `offset` of `bytes`, `nil` when none is there.
    package func longest(in bytes: UnsafeRawBufferPointer, at offset: Int, comparisons: inout Int) -> Int? {
        var found: Int?
        forEach(in: bytes, at: offset, comparisons: &comparisons) { position in
            found = position
            return false
        }
        return found
    }

    /// The positions of every needle that occurs in `bytes` (overlapping or not).
    package func occurring(in bytes: UnsafeRawBufferPointer) -> Set<Int> {
        var comparisons = 0
        return occurring(in: bytes, comparisons: &comparisons)
    }

    /// ``occurring(in:)``, counting the needles compared.
    package func occurring(in bytes: UnsafeRawBufferPointer, comparisons: inout Int) -> Set<Int> {
        var result = Set<Int>()
        for offset in 0..<bytes.count {
            forEach(in: bytes, at: offset, comparisons: &comparisons) { position in
                result.insert(position)
                return true
            }
        }
        return result
    }

    package func occurring(in bytes: [UInt8], comparisons: inout Int) -> Set<Int> {
        bytes.withUnsafeBytes { occurring(in: $0, comparisons: &comparisons) }
    }

    /// Calls `body` with the position of each needle at `offset` of `bytes`, the longest first, until it returns
    /// `false`.
    private func forEach(
        in bytes: UnsafeRawBufferPointer, at offset: Int, comparisons: inout Int, _ body: (Int) -> Bool
    ) {
        let remaining = bytes.count - offset
        if remaining >= Self.longPrefixLength, !longGroups.isEmpty {
            let prefix = LongPrefix(bytes, at: offset)
            if filterHas(prefix.filterBit), let group = longGroups[prefix] {
                for position in group where needles[position].count <= remaining {
                    comparisons += 1
                    if Self.matches(needles[position], in: bytes, at: offset), !body(position) { return }
                }
            }
        }
        if remaining >= Self.prefixLength, !groups.isEmpty {
            let prefix = bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            if filterHas(Self.filterBit(prefix)), let group = groups[prefix] {
                for position in group where needles[position].count <= remaining {
                    comparisons += 1
                    if Self.matches(needles[position], in: bytes, at: offset), !body(position) { return }
                }
            }
        }
        for position in short where needles[position].count <= remaining {
            comparisons += 1
            if Self.matches(needles[position], in: bytes, at: offset), !body(position) { return }
        }
    }

    /// Whether `needle` is at `offset` of `bytes` (the caller checked that it fits).
    private static func matches(_ needle: [UInt8], in bytes: UnsafeRawBufferPointer, at offset: Int) -> Bool {
        needle.withUnsafeBytes { needleBytes in
            memcmp(bytes.baseAddress! + offset, needleBytes.baseAddress!, needle.count) == 0
        }
    }
}
