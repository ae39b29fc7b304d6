import Foundation

/// How a failed request that may succeed later is retried: exponential backoff with jitter, and never sooner
/// than the server's `Retry-After`.
public struct RetryPolicy: Sendable, Equatable {
    /// The wait before the first retry, in seconds.
    public var initialDelay: TimeInterval
    /// Each retry waits this many times longer than the one before.
    public var multiplier: Double
    /// The longest wait between two attempts, in seconds.
    public var maximumDelay: TimeInterval
    /// Each wait is randomly up to this fraction shorter or longer, so that devices that failed together do
    /// not all retry together.
    public var jitter: Double

    public init(
        initialDelay: TimeInterval = 1, multiplier: Double = 2, maximumDelay: TimeInterval = 300,
        jitter: Double = 0.2
    ) {
        self.initialDelay = initialDelay
        self.multiplier = multiplier
        self.maximumDelay = maximumDelay
        self.jitter = min(max(jitter, 0), 1)
    }

    public static let `default` = RetryPolicy()

    /// Seconds to wait after the `attempt`-th failure in a row (0-based). With a `Retry-After` the wait is
    /// that long plus up to `jitter` of it (never less); otherwise `initialDelay · multiplier^attempt` capped at
    /// `maximumDelay`, give or take `jitter`.
    public func delay(afterFailure attempt: Int, retryAfter: TimeInterval?) -> TimeInterval {
        if let retryAfter {
            return retryAfter + retryAfter * jitter * Double.random(in: 0...1)
        }
        let exponent = Double(min(max(attempt, 0), 64))
        let base = min(maximumDelay, initialDelay * pow(max(multiplier, 1), exponent))
        return max(0, base * (1 + jitter * Double.random(in: -1...1)))
    }
}

/// Sleeps for `seconds` (`Task.sleep(nanoseconds:)`: the iOS 15 form); throws `CancellationError` when the task
/// is cancelled.
func sleep(seconds: TimeInterval) async throws {
    let nanoseconds = UInt64(min(max(seconds, 0), 86_400) * 1_000_000_000)
    try await Task.sleep(nanoseconds: nanoseconds)
}
