import Synchronization

/// A value behind a lock, shared by reference: a `Synchronization.Mutex` that closures and several owners
/// can hold. Where one object owns the value, a `Mutex` stored property is the better choice.
///
/// ```swift
/// let count = LockedValue(0)
/// count.withLock { $0 += 1 }
/// ```
///
/// - Note: Thread-safe: the value is reached only inside ``withLock(_:)``.
public final class LockedValue<Value>: Sendable {
    private let mutex: Mutex<Value>

    public init(_ value: sending Value) { mutex = Mutex(value) }

    /// Runs `body` with the value, the lock held. Never `await` or block on another lock inside.
    public func withLock<Result, Failure: Error>(
        _ body: (inout sending Value) throws(Failure) -> sending Result
    ) throws(Failure) -> sending Result {
        try mutex.withLock(body)
    }
}
