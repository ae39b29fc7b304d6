import LedgerCore

/// Time-to-live values of a message, parsed with range checks: they come from requests and from stored
/// events, and neither may ever trap (a `Double` too large for `Int64`, or an overflowing product, would
/// kill the server for every device — and crash-loop it, since the message stays in the log).
public enum MessageLifetimeBounds {
    /// FCM's longest (and default) message lifetime: 4 weeks, in seconds.
    public static let maximumSeconds: Int64 = 2_419_200

    /// Microseconds of a protobuf `Duration` in its JSON form (`"3600s"`, `"3.5s"`), or `nil` unless it is
    /// one, within 0…``maximumSeconds``.
    public static func microseconds(ofDuration text: String) -> Int64? {
        guard text.utf8.last == UInt8(ascii: "s") else { return nil }
        let number = text.utf8.dropLast()
        let parts = number.split(separator: UInt8(ascii: "."), maxSplits: 1, omittingEmptySubsequences: false)
        guard let whole = parts.first, !whole.isEmpty, whole.count <= 7,
            whole.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") })
        else { return nil }
        var seconds: Int64 = 0
        for digit in whole { seconds = seconds * 10 + Int64(digit - UInt8(ascii: "0")) }
        var micros: Int64 = 0
        // Digits past the microsecond are not kept, but they count against the bound: 2419200.000000001s is
        // past 4 weeks.
        var pastMicroseconds = false
        if parts.count == 2 {
            let fraction = parts[1]
            guard !fraction.isEmpty, fraction.count <= 9,
                fraction.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") })
            else { return nil }
            var scale: Int64 = 100_000
            for digit in fraction.prefix(6) {
                micros += Int64(digit - UInt8(ascii: "0")) * scale
                scale /= 10
            }
            pastMicroseconds = fraction.dropFirst(6).contains { $0 != UInt8(ascii: "0") }
        }
        guard seconds < maximumSeconds || (seconds == maximumSeconds && micros == 0 && !pastMicroseconds) else {
            return nil
        }
        return seconds * 1_000_000 + micros
    }

    /// The seconds of a Web Push `TTL` header (a non-negative decimal integer), at most ``maximumSeconds``;
    /// `nil` unless it is one.
    public static func seconds(ofWebPushTTL text: String) -> Int64? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
            return nil
        }
        // Any length of digits is a valid TTL; past 4 weeks (or past Int64) it is 4 weeks.
        return Int64(text).map { min($0, maximumSeconds) } ?? maximumSeconds
    }

    /// Microseconds since the UNIX epoch of an `apns-expiration` header (decimal UNIX seconds), clamped to
    /// what `LedgerTime` can hold; `nil` unless it is a decimal integer.
    public static func expiryMicroseconds(ofAPNsExpiration text: String) -> Int64? {
        guard let seconds = Int64(text) else { return nil }
        let (product, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000)
        if overflow { return seconds < 0 ? Int64.min : Int64.max }
        return product
    }
}
