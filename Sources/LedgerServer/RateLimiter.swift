import Foundation
import LedgerCore

/// Token buckets per key (a project, or one device of a project): `rate` tokens a second, holding at most
/// `capacity` (the burst).
///
/// Counted per token change for subscriptions (a 1000-token batch costs 1000), per send for the quota, per
/// registration, and per call for a device's own subscription changes and acknowledgements. A bucket that
/// has filled up again is the same as none, so buckets are dropped once full: memory stays bounded by the
/// keys active within one refill period, however many devices exist.
///
/// - Note: Thread-safe.
final class RateLimiter<Key: Hashable & Sendable>: @unchecked Sendable {
    // @unchecked: `buckets` and `sweepAt` are only touched with `lock` held.
    private struct Bucket {
        var available: Double
        var updated: Double
    }

    private let lock = NSLock()
    private var buckets: [Key: Bucket] = [:]
    private var sweepAt = 1024
    let rate: Double
    let capacity: Double
    private let now: @Sendable () -> Double

    /// - Parameters:
    ///   - rate: tokens added per second.
    ///   - capacity: the most tokens a bucket holds (the burst).
    ///   - now: seconds on a monotonic clock (injected by tests).
    init(rate: Double, capacity: Double, now: @escaping @Sendable () -> Double = monotonicSeconds) {
        self.rate = rate
        self.capacity = capacity
        self.now = now
    }

    /// Takes up to `count` tokens from `key`'s bucket; returns how many were granted (0…count).
    func take(_ count: Int, for key: Key) -> Int {
        lock.lock()
        defer { lock.unlock() }
        let time = now()
        var bucket = buckets[key] ?? Bucket(available: capacity, updated: time)
        bucket.available = min(capacity, bucket.available + max(0, time - bucket.updated) * rate)
        bucket.updated = time
        // Compared as Doubles first: a configured rate near Int.max must not trap in a conversion.
        let granted = bucket.available >= Double(count) ? count : max(0, Int(bucket.available.rounded(.down)))
        bucket.available -= Double(granted)
        buckets[key] = bucket
        if buckets.count >= sweepAt { sweep(at: time) }
        return granted
    }

    /// Whole seconds until one token is available again (the `Retry-After` value), at least 1.
    func retryAfter(for key: Key) -> Int {
        lock.lock()
        defer { lock.unlock() }
        let available = buckets[key]?.available ?? capacity
        let seconds = ((1 - available) / rate).rounded(.up)
        return seconds < 1 ? 1 : seconds > 86_400 ? 86_400 : Int(seconds)
    }

    /// Drops the buckets that have filled up again; the next sweep waits until twice as many remain.
    private func sweep(at time: Double) {
        buckets = buckets.filter { $0.value.available + max(0, time - $0.value.updated) * rate < capacity }
        sweepAt = max(1024, buckets.count * 2)
    }
}

/// Seconds on a monotonic clock.
func monotonicSeconds() -> Double {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
}

/// One device of one project: the key of the per-device limits.
struct DeviceKey: Hashable, Sendable {
    let project: ProjectID
    let token: RegistrationToken
}
