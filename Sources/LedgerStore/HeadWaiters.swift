import Synchronization

/// Tasks waiting for a ledger's head to reach a seq (a read that names the seq of an earlier write,
/// `x-ledger-min-seq`): the writer tells it each commit's last seq, a replica each applied block's, and the
/// waiters whose seq is reached resume — a notification, not a poll of the head.
///
/// Thread-safe; nothing is awaited or blocked on inside its lock.
final class HeadWaiters: Sendable {
    private struct Waiter {
        let seq: UInt64
        let continuation: CheckedContinuation<Bool, Never>
    }

    private struct State {
        var head: UInt64
        var nextID = 0
        var waiters: [Int: Waiter] = [:]
        /// Waits that timed out or were cancelled before their continuation was stored.
        var abandoned: Set<Int> = []
    }

    private let state: Mutex<State>

    init(head: UInt64) {
        state = Mutex(State(head: head))
    }

    /// The head reached `seq`: wakes every waiter for a seq at or below it.
    func advance(to seq: UInt64) {
        let woken = state.withLock { state -> [Waiter] in
            guard seq > state.head else { return [] }
            state.head = seq
            let ready = state.waiters.filter { $0.value.seq <= seq }
            for id in ready.keys { state.waiters[id] = nil }
            return Array(ready.values)
        }
        for waiter in woken { waiter.continuation.resume(returning: true) }
    }

    /// Returns `true` once the head is at or past `seq` (at once if it is), `false` after `timeout` or when the
    /// task is cancelled first.
    func wait(for seq: UInt64, upTo timeout: Duration) async -> Bool {
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
                        if state.head >= seq { return true }
                        if state.abandoned.remove(id) != nil { return false }
                        state.waiters[id] = Waiter(seq: seq, continuation: continuation)
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
