import Synchronization

/// A level that only rises, and the tasks waiting for it to reach theirs: a notification, not a poll.
///
/// A ledger's head (``Ledger/waitForHead(_:upTo:)``: the writer raises it after each commit, a replica after
/// each applied block) and a cluster node's routing (a generation raised whenever a leader or a member
/// changes, which a forwarded request and the APNs pusher wait on) are watermarks.
///
/// Thread-safe; nothing is awaited or blocked on inside its lock.
public final class Watermark: Sendable {
    private struct Waiter {
        let level: UInt64
        let continuation: CheckedContinuation<Bool, Never>
    }

    private struct State {
        var level: UInt64
        var nextID = 0
        var waiters: [Int: Waiter] = [:]
        /// Waits that timed out or were cancelled before their continuation was stored.
        var abandoned: Set<Int> = []
    }

    private let state: Mutex<State>

    public init(_ level: UInt64 = 0) {
        state = Mutex(State(level: level))
    }

    /// The level now.
    public var level: UInt64 { state.withLock { $0.level } }

    /// Raises the level to `level` (a lower one changes nothing) and wakes every waiter for a level at or below it.
    public func advance(to level: UInt64) {
        raise { max($0, level) }
    }

    /// Raises the level by one, in one step however many raise it at once: something changed.
    public func bump() {
        raise { $0 + 1 }
    }

    /// Sets the level to `next(level)` under the lock, and resumes, outside it, the waiters it reaches.
    private func raise(_ next: (UInt64) -> UInt64) {
        let woken = state.withLock { state -> [Waiter] in
            let level = next(state.level)
            guard level > state.level else { return [] }
            state.level = level
            let ready = state.waiters.filter { $0.value.level <= level }
            for id in ready.keys { state.waiters[id] = nil }
            return Array(ready.values)
        }
        for waiter in woken { waiter.continuation.resume(returning: true) }
    }

    /// Returns `true` once the level is at or past `level` (at once if it is), `false` after `timeout` or when the
    /// task is cancelled first.
    public func wait(for level: UInt64, upTo timeout: Duration) async -> Bool {
        let id = state.withLock { state -> Int in
            defer { state.nextID += 1 }
            return state.nextID
        }
        return await withTaskGroup(of: Void.self) { group in
            // Ends the wait when the timeout runs out, or when the wait is cancelled (the sleep then throws).
            group.addTask {
                try? await Task.sleep(for: timeout)
                self.abandon(id)
            }
            let reached = await withTaskCancellationHandler {
                await withCheckedContinuation { continuation in
                    let answer = state.withLock { state -> Bool? in
                        if state.level >= level { return true }
                        if state.abandoned.remove(id) != nil { return false }
                        state.waiters[id] = Waiter(level: level, continuation: continuation)
                        return nil
                    }
                    if let answer { continuation.resume(returning: answer) }
                }
            } onCancel: {
                self.abandon(id)
            }
            group.cancelAll()
            // The sleeper abandons the id as it ends; forget that mark once it has (it is never reused).
            await group.waitForAll()
            state.withLock { _ = $0.abandoned.remove(id) }
            return reached
        }
    }

    /// Ends wait `id` with `false` if it still waits; marks it abandoned if it has not begun waiting yet.
    private func abandon(_ id: Int) {
        let waiter = state.withLock { state -> Waiter? in
            if let waiter = state.waiters.removeValue(forKey: id) { return waiter }
            state.abandoned.insert(id)
            return nil
        }
        waiter?.continuation.resume(returning: false)
    }
}
