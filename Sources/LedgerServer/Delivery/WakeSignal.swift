import Synchronization

/// Wakes one waiter: a signal with nobody waiting is kept (one, however many come) for the next wait.
final class WakeSignal: Sendable {
    private let state = Mutex<(pending: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))

    func signal() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let waiter = state.waiter else {
                state.pending = true
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    /// Returns at the next signal (at once if one is pending), after `timeout`, or when the task is cancelled.
    func wait(upTo timeout: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                // Only a timeout that ran out signals: the sleeper is cancelled once the wait is over, and a
                // signal then would wake the next wait at once, and that one's the next — a loop.
                do {
                    try await Task.sleep(for: timeout)
                } catch {
                    return
                }
                self.signal()
            }
            await withTaskCancellationHandler {
                await withCheckedContinuation { continuation in
                    let pending = state.withLock { state -> Bool in
                        if state.pending {
                            state.pending = false
                            return true
                        }
                        state.waiter = continuation
                        return false
                    }
                    if pending { continuation.resume() }
                }
            } onCancel: {
                self.signal()
            }
            group.cancelAll()
        }
    }
}
