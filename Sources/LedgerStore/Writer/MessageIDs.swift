import LedgerCore

/// How the writer numbers messages: SPEC §4.1 asks for a decimal 63-bit integer unique per project; these ids
/// also follow the order of the sends and read as the send's time.
///
/// An id is the send's time in microseconds since 1970 times 1,000, plus a count for sends in the same
/// microsecond (`1795000000000000123` was sent at 1,795,000,000.000000 s), and always above the id sent last,
/// so consecutive sends take neighbouring keys of `messages`: a commit of many sends, and the audiences
/// recorded after them, write the tree's last page or two instead of one random page per message (the ids
/// were random before, and each send and each audience dirtied a page of its own). FCM's own ids carry the
/// send's time in microseconds too. Ledgers written before hold random ids anywhere in 1…2^63-1; the writer
/// still checks that an id is free and goes on to the next one when it is not.
enum MessageIDs {
    /// The largest id: 2^63-1.
    static let largest = UInt64(Int64.max)
    /// Ids for one microsecond of time before they run ahead of the clock.
    static let perMicrosecond: UInt64 = 1000

    /// The first id to try for a send at `time` after the id `last` (0 when nothing was sent): the time's id,
    /// or `last + 1` when that is higher; `nil` when `last` is the largest id (the caller picks at random).
    /// A time before 1970 or after 2262 (the largest id's) counts as the smallest id's.
    static func candidate(at time: LedgerTime, after last: UInt64) -> UInt64? {
        guard last < largest else { return nil }
        let micros = time.microseconds
        let timed = micros > 0 && UInt64(micros) <= largest / perMicrosecond ? UInt64(micros) * perMicrosecond : 1
        return max(timed, last + 1)
    }
}
