import Foundation
import LedgerCore
import NIOCore
// On Linux, `timespec` is declared by the C module under Dispatch, which MemberImportVisibility asks to be
// imported by name.
#if canImport(CDispatch)
    import CDispatch
#endif
#if canImport(CoreFoundation)
    import CoreFoundation
#endif
import Synchronization

/// Token buckets per key (a project, or one device of a project): `rate` tokens a second, holding at most
/// `capacity` (the burst).
///
/// Counted per token change for subscriptions (a 1000-token batch costs 1000), per send for the quota, per
/// registration, and per call for a device's own subscription changes and acknowledgements. A bucket that
/// has filled up again is the same as none, so buckets are dropped once full: memory stays bounded by the
/// keys active within one refill period, however many devices exist.
///
/// - Note: Thread-safe.
final class RateLimiter<Key: Hashable & Sendable>: Sendable {
    private struct Bucket {
        var available: Double
        var updated: Double
    }

    private struct Buckets {
        var buckets: [Key: Bucket] = [:]
        var sweepAt = 1024
    }

    private let state = Mutex(Buckets())
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
        let time = now()
        return state.withLock { state in
            var bucket = state.buckets[key] ?? Bucket(available: capacity, updated: time)
            bucket.available = min(capacity, bucket.available + max(0, time - bucket.updated) * rate)
            bucket.updated = time
            // Compared as Doubles first: a configured rate near Int.max must not trap in a conversion.
            let granted = bucket.available >= Double(count) ? count : max(0, Int(bucket.available.rounded(.down)))
            bucket.available -= Double(granted)
            state.buckets[key] = bucket
            if state.buckets.count >= state.sweepAt { sweep(&state, at: time) }
            return granted
        }
    }

    /// Gives back `count` tokens taken from `key`'s bucket (never past `capacity`).
    func refund(_ count: Int, for key: Key) {
        state.withLock { state in
            guard var bucket = state.buckets[key] else { return }
            bucket.available = min(capacity, bucket.available + Double(count))
            state.buckets[key] = bucket
        }
    }

    /// Whole seconds until one token is available again (the `Retry-After` value), at least 1.
    func retryAfter(for key: Key) -> Int {
        let available = state.withLock { $0.buckets[key]?.available } ?? capacity
        let seconds = ((1 - available) / rate).rounded(.up)
        return seconds < 1 ? 1 : seconds > 86_400 ? 86_400 : Int(seconds)
    }

    /// Drops the buckets that have filled up again; the next sweep waits until twice as many remain.
    private func sweep(_ state: inout Buckets, at time: Double) {
        state.buckets = state.buckets.filter {
            $0.value.available + max(0, time - $0.value.updated) * rate < capacity
        }
        state.sweepAt = max(1024, state.buckets.count * 2)
    }
}

/// Seconds on a monotonic clock.
func monotonicSeconds() -> Double {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
}

/// The part of a client's address the console's sign-in throttle and the per-address connection cap
/// (``ConnectionLimiter``) count by: a whole IPv4 address, or the /64 network of an IPv6 one (a single host is commonly given a whole /64). IPv4-mapped IPv6 addresses count as
/// their IPv4 address; a peer without an IP address (a Unix socket, a test) counts as one client.
struct ClientNetwork: Hashable, Sendable {
    let bytes: [UInt8]

    init(_ address: SocketAddress?) {
        switch address {
        case .v4(let v4):
            bytes = withUnsafeBytes(of: v4.address.sin_addr) { Array($0) }
        case .v6(let v6):
            let all = withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) }
            let mapped = all.prefix(10).allSatisfy { $0 == 0 } && all[10] == 0xFF && all[11] == 0xFF
            bytes = mapped ? Array(all.suffix(4)) : Array(all.prefix(8))
        default:
            bytes = []
        }
    }
}

/// One device of one project: the key of the per-device limits.
struct DeviceKey: Hashable, Sendable {
    let project: ProjectID
    let token: RegistrationToken
}
