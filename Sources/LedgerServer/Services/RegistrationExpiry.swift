import LedgerCore

/// `projects.<p>.registrationExpiry`: how long a registration may stay silent before it expires — a number
/// and a unit (`"270d"`, `"12h"`, `"30m"`, `"90s"`), or `"never"`. FCM's rule, 270 days, is the default.
struct RegistrationExpiry: Sendable, Equatable {
    /// `nil`: registrations never expire.
    let seconds: Int64?

    static let fcm = RegistrationExpiry(seconds: 270 * 86_400)
    static let never = RegistrationExpiry(seconds: nil)
    /// The longest expiry accepted: a hundred years, far from any overflow of microseconds in an Int64.
    static let maximumSeconds: Int64 = 100 * 365 * 86_400

    init(seconds: Int64?) {
        self.seconds = seconds
    }

    /// Reads `text`; throws naming `field` for anything else.
    init(parsing text: String, field: String) throws(LedgerCoreError) {
        if text == "never" {
            self = .never
            return
        }
        let units: [Character: Int64] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
        guard let unit = text.last.flatMap({ units[$0] }), text.count >= 2, text.count <= 12,
            text.dropLast().allSatisfy({ $0.isASCII && $0.isNumber }), let number = Int64(text.dropLast()),
            number > 0, number <= Self.maximumSeconds / unit
        else {
            throw LedgerCoreError(
                .invalidArgument, field: field,
                "expected a duration such as \"270d\", \"12h\", \"30m\" or \"90s\" (at most 100 years), or \"never\"")
        }
        self.seconds = number * unit
    }

    /// How often the sweeper looks for silent registrations: a tenth of the expiry, from 1 s to a minute.
    var sweepSeconds: Int64 { min(60, max(1, (seconds ?? 600) / 10)) }
}
