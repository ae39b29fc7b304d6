import LedgerCore

/// `projects.<p>.contentRetention` and `projects.<p>.identifierRetention`: how long the ledger keeps the contents
/// of sends, and the identifiers of a device whose registration ended — a number and a unit (`"30d"`, `"12h"`,
/// `"30m"`, `"90s"`, at most 100 years), or `"never"`, the default. Read by the same rule as
/// `registrationExpiry` (``RegistrationExpiry/init(parsing:field:)``).
struct RetentionPeriod: Sendable, Equatable {
    /// `nil`: kept for ever.
    let seconds: Int64?

    static let never = RetentionPeriod(seconds: nil)

    init(seconds: Int64?) {
        self.seconds = seconds
    }

    /// Reads `text`; throws naming `field` for anything else.
    init(parsing text: String, field: String) throws(LedgerCoreError) {
        seconds = try RegistrationExpiry(parsing: text, field: field).seconds
    }

    /// How often the sweep looks: a tenth of the period, from 1 s to an hour (each sweep that forgets something
    /// compacts the file, so a long period is swept seldom; what it keeps is kept at most this much longer).
    var sweepSeconds: Int64 { min(3600, max(1, (seconds ?? 36_000) / 10)) }
}
