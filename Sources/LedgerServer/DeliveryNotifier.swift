import Foundation

/// Wakes devices waiting for messages (long polls and streams) when a project's writer commits sends.
///
/// A generation counter closes the race between "read the inbox, found nothing" and "wait": a waiter
/// passes the generation it read before looking, and returns at once if a send committed since.
///
/// - Note: Thread-safe; `notify` runs on the ledger's writer thread and never blocks it.
final class DeliveryNotifier: @unchecked Sendable {
    // @unchecked: `generation` and `waiters` are only touched with `lock` held.
    private let lock = NSLock()
    private var generation: UInt64 = 0
    private var waiters: [UUID: CheckedContinuation<Void, Never>] = [:]

    /// The current generation: read it before looking at the inbox.
    var current: UInt64 {
        lock.lock()
        defer { lock.unlock() }
        return generation
    }

    /// Sends committed: wake every waiter.
    func notify() {
        lock.lock()
        generation &+= 1
        let woken = waiters
        waiters.removeAll()
        lock.unlock()
        for continuation in woken.values { continuation.resume() }
    }

    /// Returns when sends commit after `seen`, or after `timeout`, or when the task is cancelled.
    func wait(after seen: UInt64, timeout: Duration) async {
        let id = UUID()
        await withTaskCancellationHandler {
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    await withCheckedContinuation { continuation in
                        self.lock.lock()
                        if self.generation != seen || Task.isCancelled {
                            self.lock.unlock()
                            continuation.resume()
                            return
                        }
                        self.waiters[id] = continuation
                        self.lock.unlock()
                    }
                }
                group.addTask { try? await Task.sleep(for: timeout) }
                await group.next()
                group.cancelAll()
                self.wake(id)
                await group.waitForAll()
            }
        } onCancel: {
            self.wake(id)
        }
    }

    /// Resumes one waiter if it is still waiting.
    private func wake(_ id: UUID) {
        lock.lock()
        let continuation = waiters.removeValue(forKey: id)
        lock.unlock()
        continuation?.resume()
    }
}
