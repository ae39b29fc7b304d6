import Dispatch
import Synchronization

/// The one bridge from a thread to work done elsewhere — a worker's job, a task — whose completion the thread
/// blocks for: ``SerialWorker/runBlocking(ifStopped:timeout:_:)`` and a cluster leader's gate are built on it.
///
/// - Note: Block only a thread that is not one of Swift's cooperative pool (a worker's): a task awaits instead.
public enum BlockingWait {
    /// What became of the wait.
    public enum Outcome<Value: Sendable>: Sendable {
        /// The work completed with `Value`.
        case completed(Value)
        /// The work was not handed over (`start` returned `false`).
        case notStarted
        /// `timeout` passed first; the work may still complete, and nobody will read it.
        case timedOut
    }

    /// Hands work over with `start` — given the completion to call once, from any thread — and blocks until it
    /// is called or `timeout` (none: for ever) passes.
    public static func wait<Value: Sendable>(
        timeout: Duration? = nil, _ start: (@escaping @Sendable (Value) -> Void) -> Bool
    ) -> Outcome<Value> {
        let outcome = Mutex<Value?>(nil)
        let done = DispatchSemaphore(value: 0)
        let started = start { value in
            outcome.withLock { $0 = value }
            done.signal()
        }
        guard started else { return .notStarted }
        if let timeout {
            let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
            if done.wait(timeout: .now() + seconds) == .timedOut { return .timedOut }
        } else {
            done.wait()
        }
        guard let value = outcome.withLock({ $0 }) else { return .timedOut }
        return .completed(value)
    }
}
