import Foundation
import LedgerStore

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

/// What delivery shares across one project's devices.
final class DeliveryState: Sendable {
    /// Wakes waiting devices when sends commit.
    let notifier = DeliveryNotifier()
    /// Recent sends, decoded and with their audiences, for every device's inbox.
    let sends = SendCache()
    /// Recent sends' delivery JSON, the same bytes for every device.
    let payloads = PayloadCache()
}

/// The delivery events of recent sends, by seq and expiry (the expiry depends on the device's platform; the
/// rest is the same for every device that receives the send).
final class PayloadCache: @unchecked Sendable {
    // @unchecked: `entries` is only touched with `lock` held.
    private struct Key: Hashable {
        let seq: UInt64
        let expires: Int64
    }

    private let lock = NSLock()
    private var entries: [Key: [UInt8]] = [:]
    private let capacity = 512

    func bytes(for message: InboxMessage, make: () throws -> [UInt8]) rethrows -> [UInt8] {
        let key = Key(seq: message.cursor, expires: message.expires.microseconds)
        if let cached = lock.withLock({ entries[key] }) { return cached }
        let bytes = try make()
        lock.withLock {
            entries[key] = bytes
            if entries.count > capacity, let oldest = entries.keys.min(by: { $0.seq < $1.seq }) {
                entries[oldest] = nil
            }
        }
        return bytes
    }
}
