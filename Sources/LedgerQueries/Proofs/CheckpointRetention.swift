/// Which of a project's kept checkpoints its checkpoint files keep as they age (docs/compliance.md, "How long
/// the checkpoint files keep a checkpoint"): every checkpoint signed in the last hour; of older ones, the last
/// signed in each clock hour (UTC) that began less than 30 days ago, and the last of each UTC day before that. So
/// a file written once a second holds about 3,600 + 720 lines, and then grows by a line a day.
///
/// Whether an hour is kept by the hour or by the day is decided for the whole hour (by when it began), so that a
/// line dropped once is never one the rule would keep later: the lines of one hour are always in one bucket.
///
/// The files are a record for the operator, not what a proof comes from: a consistency proof from any size the
/// server ever signed is computed from the Merkle tree, which keeps every event.
///
/// ```swift
/// let kept = CheckpointRetention().kept(times: [t0, t1, t2], now: now)   // the indices to keep, in order
/// ```
public struct CheckpointRetention: Sendable, Equatable {
    /// Every checkpoint younger than this (seconds) is kept.
    public var everyWithin: Int64 = 3_600
    /// Older checkpoints of an hour that began less than this long ago (seconds) are kept one a clock hour.
    public var hourlyWithin: Int64 = 30 * 86_400
    /// Older checkpoints are kept one a UTC day.
    static let hour: Int64 = 3_600
    static let day: Int64 = 86_400

    public init() {}

    /// The indices of the lines to keep, in order, when the lines were signed at `times` (seconds since the Unix
    /// epoch; oldest first) and it is `now`.
    ///
    /// A line without a time (written before times were recorded) counts as signed when the next line with a
    /// time was, the youngest it can be, so that it is kept at least as long as the rule says; with no such
    /// line after it, as signed now. A line signed after `now` (the clock went back) counts as young. In each
    /// hour or day the last line is kept, so the file's last line, the latest checkpoint, always is.
    ///
    /// - Note: Pure: no clock but `now`.
    public func kept(times: [Int64?], now: Int64) -> [Int] {
        var effective = [Int64](repeating: now, count: times.count)
        var next = now
        for index in times.indices.reversed() {
            if let time = times[index] { next = time }
            effective[index] = next
        }
        // The bucket of each line; a line that is kept whatever follows it has none.
        enum Bucket: Hashable {
            case hour(Int64)
            case day(Int64)
        }
        var lastOf: [Bucket: Int] = [:]
        var kept: [Bool] = Array(repeating: false, count: times.count)
        for (index, time) in effective.enumerated() {
            // `now - time` cannot overflow a useful way: times are seconds since 1970, range-checked on reading.
            let age = now.subtractingReportingOverflow(time)
            guard !age.overflow, age.partialValue >= everyWithin else {
                kept[index] = true
                continue
            }
            let hour = time.floorDivided(by: Self.hour)
            let hourAge = now.subtractingReportingOverflow(hour.multipliedReportingOverflow(by: Self.hour).partialValue)
            let bucket: Bucket =
                !hourAge.overflow && hourAge.partialValue >= hourlyWithin
                ? .day(time.floorDivided(by: Self.day)) : .hour(hour)
            if let previous = lastOf[bucket] { kept[previous] = false }
            lastOf[bucket] = index
            kept[index] = true
        }
        return kept.indices.filter { kept[$0] }
    }
}

extension Int64 {
    /// Division rounded toward minus infinity (a time before 1970 falls in the hour before, not after).
    fileprivate func floorDivided(by divisor: Int64) -> Int64 {
        let (quotient, remainder) = quotientAndRemainder(dividingBy: divisor)
        return remainder < 0 ? quotient - 1 : quotient
    }
}
