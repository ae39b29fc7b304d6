/// A UTC instant in whole microseconds since 1970-01-01T00:00:00Z.
///
/// Formatted as RFC 3339 with six fractional digits (`2026-03-01T12:00:00.000000Z`). Written by hand
/// rather than with `DateFormatter`: the log export formats millions of these, and the round trip must
/// be exact to the microsecond.
public struct LedgerTime: Hashable, Comparable, Sendable, CustomStringConvertible {
    public var microseconds: Int64

    public init(microseconds: Int64) { self.microseconds = microseconds }

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.microseconds < rhs.microseconds }

    public var description: String { rfc3339 }

    /// `YYYY-MM-DDTHH:MM:SS.ffffffZ`.
    public var rfc3339: String {
        var bytes: [UInt8] = []
        appendRFC3339(to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Appends the RFC 3339 form to `out` without building intermediate strings.
    public func appendRFC3339(to out: inout [UInt8]) {
        let (days, microsOfDay) = microseconds.floorDivided(by: 86_400_000_000)
        let (year, month, day) = Self.civil(fromDays: days)
        let seconds = microsOfDay / 1_000_000
        if year < 0 { out.append(UInt8(ascii: "-")) }
        appendDigits(UInt64(year.magnitude), minimumWidth: 4, to: &out)
        out.append(UInt8(ascii: "-"))
        appendDigits(UInt64(month), minimumWidth: 2, to: &out)
        out.append(UInt8(ascii: "-"))
        appendDigits(UInt64(day), minimumWidth: 2, to: &out)
        out.append(UInt8(ascii: "T"))
        appendDigits(UInt64(seconds / 3600), minimumWidth: 2, to: &out)
        out.append(UInt8(ascii: ":"))
        appendDigits(UInt64(seconds / 60 % 60), minimumWidth: 2, to: &out)
        out.append(UInt8(ascii: ":"))
        appendDigits(UInt64(seconds % 60), minimumWidth: 2, to: &out)
        out.append(UInt8(ascii: "."))
        appendDigits(UInt64(microsOfDay % 1_000_000), minimumWidth: 6, to: &out)
        out.append(UInt8(ascii: "Z"))
    }

    /// `YYYY-MM-DD` (the `addDate` of Instance ID info).
    public var date: String {
        let (year, month, day) = Self.civil(fromDays: microseconds.floorDivided(by: 86_400_000_000).quotient)
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))"
    }

    /// Parses `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM[:SS[.f…]]` with `Z` or `±HH:MM`, or a whole number of
    /// microseconds since the epoch. A date alone means its start (00:00 UTC).
    public init?(parsing text: String) {
        if let micros = Int64(text) {
            self.microseconds = micros
            return
        }
        var scanner = Scanner(Array(text.utf8))
        guard let year = scanner.number(digits: 4), scanner.skip("-"),
            let month = scanner.number(digits: 2), scanner.skip("-"),
            let day = scanner.number(digits: 2), (1...12).contains(month),
            (1...Self.daysInMonth(year: year, month: month)).contains(day)
        else { return nil }
        var micros = Self.days(year: year, month: month, day: day) * 86_400_000_000
        if scanner.atEnd {
            self.microseconds = micros
            return
        }
        guard scanner.skip("T") || scanner.skip(" ") || scanner.skip("t"),
            let hour = scanner.number(digits: 2), hour < 24, scanner.skip(":"),
            let minute = scanner.number(digits: 2), minute < 60
        else { return nil }
        var second: Int64 = 0
        if scanner.skip(":") {
            guard let value = scanner.number(digits: 2), value < 61 else { return nil }
            second = value
        }
        var fraction: Int64 = 0
        if scanner.skip(".") {
            var digits = 0
            while let digit = scanner.digit() {
                if digits < 6 { fraction = fraction * 10 + digit }
                digits += 1
            }
            guard digits > 0 else { return nil }
            if digits < 6 { for _ in digits..<6 { fraction *= 10 } }
        }
        micros += ((hour * 60 + minute) * 60 + second) * 1_000_000 + fraction
        if scanner.skip("Z") || scanner.skip("z") {
        } else if let sign = scanner.sign() {
            guard let offsetHour = scanner.number(digits: 2), offsetHour < 24, scanner.skip(":"),
                let offsetMinute = scanner.number(digits: 2), offsetMinute < 60
            else { return nil }
            micros -= sign * (offsetHour * 60 + offsetMinute) * 60_000_000
        } else {
            return nil
        }
        guard scanner.atEnd else { return nil }
        self.microseconds = micros
    }

    /// The days of `month` (1…12) in `year` of the proleptic Gregorian calendar: 2026-02-30 is no date.
    static func daysInMonth(year: Int64, month: Int64) -> Int64 {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    // Howard Hinnant's civil-from-days and days-from-civil algorithms.
    static func civil(fromDays days: Int64) -> (Int64, Int64, Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    static func days(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }
}

private func pad(_ value: Int64, _ width: Int) -> String {
    let digits = String(value)
    return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
}

extension Int64 {
    fileprivate func floorDivided(by divisor: Int64) -> (quotient: Int64, remainder: Int64) {
        var quotient = self / divisor
        var remainder = self % divisor
        if remainder < 0 {
            quotient -= 1
            remainder += divisor
        }
        return (quotient, remainder)
    }
}

private struct Scanner {
    let bytes: [UInt8]
    var index = 0
    init(_ bytes: [UInt8]) { self.bytes = bytes }

    var atEnd: Bool { index == bytes.count }

    mutating func skip(_ character: Unicode.Scalar) -> Bool {
        guard index < bytes.count, bytes[index] == UInt8(ascii: character) else { return false }
        index += 1
        return true
    }

    mutating func digit() -> Int64? {
        guard index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) else { return nil }
        defer { index += 1 }
        return Int64(bytes[index] - UInt8(ascii: "0"))
    }

    mutating func number(digits: Int) -> Int64? {
        var value: Int64 = 0
        for _ in 0..<digits {
            guard let digit = digit() else { return nil }
            value = value * 10 + digit
        }
        return value
    }

    mutating func sign() -> Int64? {
        if skip("+") { return 1 }
        if skip("-") { return -1 }
        return nil
    }
}
