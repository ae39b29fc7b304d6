import LedgerCore

/// Percent-decoding of URL path segments (`%2F` → `/`), as Foundation's `removingPercentEncoding` does it:
/// nil when a `%` is not followed by two hex digits or the decoded bytes are not UTF-8; `+` stays `+`.
/// (Foundation's replaces invalid UTF-8 with U+FFFD instead when the string holds non-ASCII characters; no
/// token, topic or project name may hold U+FFFD, so refusing ends in a 400 as repairing would.)
///
/// Written by hand because Foundation's goes through CFString and UTF-16: decoding the registration token in
/// every per-token subscribe path was 9.7 % of the server's samples under load.
/// Hummingbird has the same function but not as public API.
public enum PercentDecoding {
    /// `text` with its percent escapes decoded, or nil (see the type).
    public static func decode(_ text: String) -> String? {
        var copy = text
        return copy.withUTF8 { bytes -> String? in
            guard let firstEscape = bytes.firstIndex(of: UInt8(ascii: "%")) else { return text }
            var decoded: [UInt8] = []
            decoded.reserveCapacity(bytes.count)
            decoded.append(contentsOf: bytes[..<firstEscape])
            var index = firstEscape
            while index < bytes.count {
                let byte = bytes[index]
                guard byte == UInt8(ascii: "%") else {
                    decoded.append(byte)
                    index += 1
                    continue
                }
                guard index + 2 < bytes.count, let high = Hex.value(ofDigit: bytes[index + 1]),
                    let low = Hex.value(ofDigit: bytes[index + 2])
                else { return nil }
                decoded.append(high << 4 | low)
                index += 3
            }
            return String(validating: decoded, as: UTF8.self)
        }
    }
}
