/// What an erasure's reason may not hold: the reason is kept in the log for ever, so an identifier in it would
/// come back in every file the erasure cleaned (docs/compliance.md, "Erasure").
///
/// A reason is refused when it holds
///
/// 1. a form of a token being erased (``IdentifierEncodings/encodings(of:)``: text, hex, base64, base64url,
///    percent-encoded), anywhere in it;
/// 2. a **token-shaped run**: ``minimumRun`` or more characters in a row from `A–Z a–z 0–9 + / _ -` (the
///    alphabets of base64, base64url and hex). Every token this server issues holds one (a run of 128 base64url
///    digits), so do FCM's tokens, every APNs token in hex (32 to 400 digits), and the hex, base64 and
///    percent-encoding of all of those; a prose reason ("user request 2026-12-01 ticket #4411", a URL) does
///    not: words, dates and numbers are shorter and spaces, `.`, `:` and `#` end a run;
/// 3. a registration token or APNs token the project knows now (any device's, as the caller looks them up):
///    each run of token characters (`A–Z a–z 0–9 _ : . -`, and without a leading or trailing `.` or `:`) is
///    looked up as a token, in the reason as written and percent-decoded; each run of hex digits and each run of
///    base64 digits (either alphabet, optional `=` padding) is decoded and looked up as a token and, when 16 to
///    200 bytes, as an APNs token.
///
/// A token erased before is known to nothing any more (the ledger keeps no copy of it, by design): only rule 2
/// refuses it, so a short token (fewer than ``minimumRun`` characters of the run alphabet, which this server
/// never issues) erased before can be written in a later reason.
///
/// ```swift
/// let reason = ReasonIdentifiers("GDPR Art. 17, ticket 4711")
/// let refusal = try reason.refusal(
///     erasing: tokens, isKnownToken: { try snapshot.instanceID(of: $0) != nil },
///     holdsAnyAPNsToken: { try snapshot.holdsAnyAPNsToken(among: $0) })  // nil: accepted
/// ```
///
/// - Important: The reason may hold a secret: never log it, nor a refusal's offsets into it.
public struct ReasonIdentifiers: Sendable {
    /// The shortest token-shaped run (rule 2): 32, the length of the shortest APNs token in hex (16 bytes).
    public static let minimumRun = 32

    /// The reason's UTF-8 bytes.
    public let bytes: [UInt8]

    public init(_ reason: String) { bytes = Array(reason.utf8) }

    /// Why a reason is refused: the rule it breaks, as the error message says it.
    public struct Refusal: Sendable, Equatable, CustomStringConvertible {
        public let rule: Rule
        public var description: String { rule.message }
    }

    /// The three rules (above).
    public enum Rule: Sendable, Equatable {
        case quotesErasedToken
        case tokenShaped
        case quotesKnownIdentifier

        /// The error message: the rule, never the offending text.
        public var message: String {
            switch self {
            case .quotesErasedToken:
                "reason must not hold a token being erased, in any form (text, hex, base64, base64url, "
                    + "percent-encoded)"
            case .tokenShaped:
                "reason must not hold a token-shaped string: \(ReasonIdentifiers.minimumRun) or more characters in "
                    + "a row from A-Z a-z 0-9 + / _ - (how tokens and their hex and base64 look)"
            case .quotesKnownIdentifier:
                "reason must not hold a registration token or APNs token of this project, in any form (text, hex, "
                    + "base64, base64url, percent-encoded)"
            }
        }
    }

    /// The first rule the reason breaks, or `nil` when it may be kept.
    ///
    /// - Parameters:
    ///   - erasing: the tokens the request erases.
    ///   - isKnownToken: whether the project knows a registration token now.
    ///   - holdsAnyAPNsToken: whether a device of the project holds or held one of these APNs tokens now
    ///     (called at most once, and only with a non-empty set).
    /// - Throws: what the lookups throw.
    public func refusal(
        erasing: [RegistrationToken], isKnownToken: (RegistrationToken) throws -> Bool,
        holdsAnyAPNsToken: (Set<[UInt8]>) throws -> Bool
    ) throws -> Refusal? {
        var erased = IdentifierEncodings()
        // Every form, however short: refusing a reason costs nothing, unlike rewriting contents.
        for token in erasing { erased.add(Array(token.rawValue.utf8), replacedBy: [], owner: 0, shortest: 1) }
        if erased.occurs(in: bytes) { return Refusal(rule: .quotesErasedToken) }
        if tokenShapedRun != nil { return Refusal(rule: .tokenShaped) }
        let candidates = self.candidates
        for token in candidates.tokens where try isKnownToken(token) { return Refusal(rule: .quotesKnownIdentifier) }
        if !candidates.apnsTokens.isEmpty, try holdsAnyAPNsToken(candidates.apnsTokens) {
            return Refusal(rule: .quotesKnownIdentifier)
        }
        return nil
    }

    /// The byte range of the first token-shaped run (rule 2), or `nil`.
    public var tokenShapedRun: Range<Int>? {
        Self.runs(in: bytes, of: Self.isRunByte).first { $0.count >= Self.minimumRun }
    }

    /// What rule 3 looks up: the registration tokens and the APNs tokens the reason may be quoting.
    public var candidates: (tokens: [RegistrationToken], apnsTokens: Set<[UInt8]>) {
        var tokens = Set<String>()
        var apnsTokens = Set<[UInt8]>()
        for text in [bytes, Self.percentDecoded(bytes)].compactMap({ $0 }) {
            for run in Self.runs(in: text, of: Self.isTokenByte) {
                let trimmed = Self.trimmed(text[run])
                for candidate in [text[run], trimmed] where !candidate.isEmpty {
                    tokens.insert(String(decoding: candidate, as: UTF8.self))
                }
            }
            var decoded: [[UInt8]] = []
            for run in Self.runs(in: text, of: { Hex.value(ofDigit: $0) != nil }) {
                if let bytes = Hex.decode(String(decoding: text[run], as: UTF8.self)) { decoded.append(bytes) }
            }
            for run in Self.runs(in: text, of: { Base64Text.value(ofDigit: $0) != nil }) {
                if let bytes = Base64Text.decode(text[run]) { decoded.append(bytes) }
            }
            for value in decoded where !value.isEmpty {
                if let text = String(validating: value, as: UTF8.self) { tokens.insert(text) }
                if APNsDeviceToken.byteRange.contains(value.count) { apnsTokens.insert(value) }
            }
        }
        let valid = tokens.sorted().compactMap { try? RegistrationToken($0) }
        return (valid, apnsTokens)
    }

    /// The maximal runs of bytes for which `member` holds.
    static func runs(in bytes: [UInt8], of member: (UInt8) -> Bool) -> [Range<Int>] {
        var runs: [Range<Int>] = []
        var start: Int?
        for (index, byte) in bytes.enumerated() {
            if member(byte) {
                if start == nil { start = index }
            } else if let begun = start {
                runs.append(begun..<index)
                start = nil
            }
        }
        if let begun = start { runs.append(begun..<bytes.count) }
        return runs
    }

    /// `A–Z a–z 0–9 + / _ -`: the characters of a token-shaped run.
    static func isRunByte(_ byte: UInt8) -> Bool {
        Base64Text.value(ofDigit: byte) != nil
    }

    /// `A–Z a–z 0–9 _ : . -`: the characters of a registration token.
    static func isTokenByte(_ byte: UInt8) -> Bool { RegistrationToken.isTokenByte(byte) }

    /// `run` without the `.` and `:` that end a sentence or begin a list.
    static func trimmed(_ run: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var run = run
        let punctuation: Set<UInt8> = [UInt8(ascii: "."), UInt8(ascii: ":")]
        while let first = run.first, punctuation.contains(first) { run.removeFirst() }
        while let last = run.last, punctuation.contains(last) { run.removeLast() }
        return run
    }

    /// `bytes` with each `%XX` decoded, or `nil` when it holds none.
    static func percentDecoded(_ bytes: [UInt8]) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var decodedAny = false
        var index = 0
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: "%"), index + 2 < bytes.count,
                let high = Hex.value(ofDigit: bytes[index + 1]), let low = Hex.value(ofDigit: bytes[index + 2])
            {
                out.append(high << 4 | low)
                decodedAny = true
                index += 3
            } else {
                out.append(bytes[index])
                index += 1
            }
        }
        return decodedAny ? out : nil
    }
}
