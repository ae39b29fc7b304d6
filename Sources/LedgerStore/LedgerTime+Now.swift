import Foundation
import LedgerCore

extension LedgerTime {
    /// The current time from the system clock.
    public static func now() -> LedgerTime {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return LedgerTime(microseconds: Int64(spec.tv_sec) * 1_000_000 + Int64(spec.tv_nsec) / 1000)
    }
}
