import Foundation
import LedgerCore

/// Token buckets per project: `rate` tokens a second, holding at most one second's worth (or `burst`).
///
/// Counted per token change for subscriptions (a 1000-token batch costs 1000) and per send for the quota.
///
/// - Note: Thread-safe.
final class RateLimiter: @unchecked Sendable {
    // @unchecked: `buckets` is only touched with `lock` held.
    private struct Bucket {
        var available: Double
        var updated: Double
    }

    private let lock = NSLock()
    private var buckets: [ProjectID: Bucket] = [:]
    let rate: Double
    let capacity: Double
    private let now: @Sendable () -> Double

    /// - Parameters:
    ///   - rate: tokens added per second.
    ///   - capacity: the most tokens a bucket holds (the burst).
    ///   - now: seconds on a monotonic clock (injected by tests).
    init(rate: Double, capacity: Double, now: @escaping @Sendable () -> Double = RateLimiter.monotonicSeconds) {
        self.rate = rate
        self.capacity = capacity
        self.now = now
    }

    /// Takes up to `count` tokens from `project`'s bucket; returns how many were granted (0…count).
    func take(_ count: Int, for project: ProjectID) -> Int {
        lock.lock()
        defer { lock.unlock() }
        let time = now()
        var bucket = buckets[project] ?? Bucket(available: capacity, updated: time)
        bucket.available = min(capacity, bucket.available + (time - bucket.updated) * rate)
        bucket.updated = time
        let granted = min(count, Int(bucket.available.rounded(.down)))
        bucket.available -= Double(granted)
        buckets[project] = bucket
        return max(granted, 0)
    }

    /// Whole seconds until one token is available again (the `Retry-After` value), at least 1.
    func retryAfter(for project: ProjectID) -> Int {
        lock.lock()
        defer { lock.unlock() }
        let available = buckets[project]?.available ?? capacity
        return max(1, Int(((1 - available) / rate).rounded(.up)))
    }

    static func monotonicSeconds() -> Double {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
    }
}
