/// How far a project's pushes are settled while its broadcasts go on in a lane of their own (``ProjectPusher``):
/// the main loop walks the sends in log order and hands each broadcast to the broadcast lane, which makes them in
/// log order while the main loop goes on.
///
/// `pushProgress.settled_through` says "every send at or before this seq is finished": a restart reads the sends
/// after it again (``LedgerSnapshot/pushesSettledThrough()``), and skips those finished. So no value recorded may pass
/// a broadcast the lane has not recorded finished — after a crash it would never be made. Whatever either side
/// records is at most the seq before the oldest unfinished broadcast, and the lane's at most what the main loop has
/// passed. Both only grow once true (a send, once finished, stays finished; a broadcast handed later is later in the
/// log than anything the main loop passed), so the fold keeping the larger of two values recorded at once is sound.
///
/// A value type: ``ProjectPusher`` keeps it in a `Mutex`.
struct PushSettlement: Sendable, Equatable {
    /// Every send at or before it is finished, or a broadcast handed to the lane; `nil` before the main loop read
    /// where to start.
    private(set) var mainThrough: UInt64?
    /// The broadcasts handed to the lane and not recorded finished yet, in log order.
    private(set) var unfinishedBroadcasts: [UInt64] = []

    /// The main loop has passed `seq` (finished it, or handed it to the lane).
    mutating func mainPassed(_ seq: UInt64) {
        mainThrough = max(mainThrough ?? 0, seq)
    }

    /// The main loop hands the broadcast at `seq` to the lane (before it passes it; in log order, so it goes last).
    mutating func handed(_ seq: UInt64) {
        guard !unfinishedBroadcasts.contains(seq) else { return }
        let later = unfinishedBroadcasts.firstIndex { $0 > seq } ?? unfinishedBroadcasts.endIndex
        unfinishedBroadcasts.insert(seq, at: later)
    }

    /// The lane has recorded the broadcast at `seq` finished.
    mutating func broadcastRecorded(_ seq: UInt64) {
        unfinishedBroadcasts.removeAll { $0 == seq }
    }

    /// What the main loop may record as settled when every send up to `candidate` is finished or handed to the lane:
    /// `candidate`, held before the oldest unfinished broadcast.
    func settled(upTo candidate: UInt64) -> UInt64 {
        guard let oldest = unfinishedBroadcasts.first else { return candidate }
        return min(candidate, oldest - min(oldest, 1))
    }

    /// What the lane may record with the broadcast at `seq` finishing: what the main loop has passed, held before
    /// the oldest other unfinished broadcast (0, which moves nothing, before the main loop started).
    func settled(finishingBroadcast seq: UInt64) -> UInt64 {
        let through = mainThrough ?? 0
        guard let oldest = unfinishedBroadcasts.first(where: { $0 != seq }) else { return through }
        return min(through, oldest - min(oldest, 1))
    }

    /// How long the lane waits before trying a broadcast again after `failures` tries in a row got no answer, 429 or
    /// a 5xx: APNs' `Retry-After` when it gave one (at least a second), else 1 s doubling to ``maximumRetryDelay``.
    static func retryDelay(afterFailures failures: Int, retryAfter: Int?) -> Duration {
        if let retryAfter { return .seconds(max(1, retryAfter)) }
        let doublings = min(max(failures, 1) - 1, 6)
        return min(.seconds(1 << doublings), maximumRetryDelay)
    }

    /// The longest wait between two tries of a broadcast APNs did not take (without a `Retry-After`).
    static let maximumRetryDelay: Duration = .seconds(60)
}
