import Foundation
import LedgerCore
import LedgerStore

/// Wakes the devices waiting for messages (long polls and streams) that a committed send is addressed to.
///
/// The writer thread only hands over the new sends' seqs (it never blocks); a dispatcher task computes each
/// send's audience once (``SendCache``) and resumes exactly the waiting devices in it — a send to a topic
/// with a thousand subscribers wakes a thousand streams, not every open stream of the project.
///
/// A generation counter closes the race between "read the inbox, found nothing" and "wait": a waiter passes
/// the generation it read before looking, and returns at once if sends committed since.
///
/// Waiting costs one continuation: timeouts are kept as deadlines and one sweeper task resumes the expired
/// waiters every ``sweepInterval`` (a timer task per wait cost more CPU than the delivery itself when a
/// send woke a thousand streams), so a wait may last up to one interval longer than asked.
///
/// - Note: Thread-safe. Every stored property below `lock` is only touched with `lock` held.
final class DeliveryNotifier: @unchecked Sendable {
    private struct Waiter {
        let instance: InstanceID
        let deadline: ContinuousClock.Instant
        let continuation: CheckedContinuation<Void, Never>
    }

    static let sweepInterval: Duration = .milliseconds(100)

    private let lock = NSLock()
    private var generation: UInt64 = 0
    private var waiters: [UInt64: Waiter] = [:]
    private var nextWaiter: UInt64 = 0
    private var pending: [UInt64] = []
    private var dispatching = false
    private var sweeping = false
    /// Reads the ledger to find each send's audience; set when the project's ledger opens.
    private var audiences: (@Sendable ([UInt64]) throws -> [InstanceSet])?

    /// The current generation: read it before looking at the inbox.
    var current: UInt64 {
        lock.withLock { generation }
    }

    /// How to compute the audiences of committed sends (the project's ledger and send cache).
    func connect(audiences: @escaping @Sendable ([UInt64]) throws -> [InstanceSet]) {
        lock.withLock { self.audiences = audiences }
    }

    /// Sends committed at `seqs` (called on the writer thread): bump the generation and hand the seqs to
    /// the dispatcher.
    func notify(seqs: [UInt64]) {
        let start = lock.withLock { () -> Bool in
            generation &+= 1
            pending += seqs
            guard !dispatching else { return false }
            dispatching = true
            return true
        }
        if start { Task.detached { self.dispatch() } }
    }

    /// Wakes `instance`'s waiters: its registration has ended, and its streams and polls must see that now
    /// rather than at their next keep-alive. The generation moves too, so a stream that read "registered"
    /// just before the unregistration committed does not start waiting.
    func wake(_ instance: InstanceID) {
        let woken = lock.withLock { () -> [Waiter] in
            generation &+= 1
            return take { $0.instance == instance }
        }
        for waiter in woken { waiter.continuation.resume() }
    }

    /// Wakes every waiter (the server is stopping).
    func wakeAll() {
        let woken = lock.withLock { () -> [Waiter] in
            generation &+= 1
            defer { waiters.removeAll() }
            return Array(waiters.values)
        }
        for waiter in woken { waiter.continuation.resume() }
    }

    /// Resumes the waiters in the audiences of the pending sends, until none are pending.
    ///
    /// With nobody waiting the sends are dropped without computing their audiences: a device that starts
    /// waiting later read the generation before it looked at its inbox, and either that look found the send
    /// or the generation has moved since and its wait returns at once.
    private func dispatch() {
        while true {
            let (seqs, compute) = lock.withLock { () -> ([UInt64], (@Sendable ([UInt64]) throws -> [InstanceSet])?) in
                if waiters.isEmpty { pending.removeAll() }
                defer { pending.removeAll() }
                if pending.isEmpty { dispatching = false }
                return (pending, audiences)
            }
            guard !seqs.isEmpty else { return }
            // If the audiences cannot be read, wake everyone: each device then reads its own inbox.
            let sets = (try? compute?(seqs)) ?? nil
            let woken = lock.withLock { () -> [Waiter] in
                take { waiter in sets.map { $0.contains { $0.contains(waiter.instance) } } ?? true }
            }
            for waiter in woken { waiter.continuation.resume() }
        }
    }

    /// Returns when a send addressed to `instance` commits after `seen`, after `timeout` (give or take
    /// ``sweepInterval``), or on cancellation.
    func wait(for instance: InstanceID, after seen: UInt64, timeout: Duration) async {
        let deadline = ContinuousClock.now + timeout
        let id = lock.withLock { () -> UInt64 in
            nextWaiter &+= 1
            return nextWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let (immediate, startSweeper) = lock.withLock { () -> (Bool, Bool) in
                    if generation != seen || Task.isCancelled { return (true, false) }
                    waiters[id] = Waiter(instance: instance, deadline: deadline, continuation: continuation)
                    let startSweeper = !sweeping
                    sweeping = true
                    return (false, startSweeper)
                }
                if immediate { continuation.resume() }
                if startSweeper { Task.detached { await self.sweep() } }
            }
        } onCancel: {
            let waiter = lock.withLock { waiters.removeValue(forKey: id) }
            waiter?.continuation.resume()
        }
    }

    /// Resumes the waiters whose deadline has passed, every ``sweepInterval``, while any are waiting.
    private func sweep() async {
        while true {
            try? await Task.sleep(for: Self.sweepInterval)
            let now = ContinuousClock.now
            let (expired, done) = lock.withLock { () -> ([Waiter], Bool) in
                let expired = take { $0.deadline <= now }
                if waiters.isEmpty { sweeping = false }
                return (expired, waiters.isEmpty)
            }
            for waiter in expired { waiter.continuation.resume() }
            if done { return }
        }
    }

    /// Removes and returns the waiters that `chosen` picks (with `lock` held).
    private func take(where chosen: (Waiter) -> Bool) -> [Waiter] {
        var taken: [(id: UInt64, waiter: Waiter)] = []
        for (id, waiter) in waiters where chosen(waiter) { taken.append((id, waiter)) }
        for entry in taken { waiters[entry.id] = nil }
        return taken.map(\.waiter)
    }
}

/// What delivery shares across one project's devices.
final class DeliveryState: Sendable {
    /// Wakes waiting devices when sends commit.
    let notifier = DeliveryNotifier()
    /// Recent sends, decoded, with their audiences and payloads, for every device's inbox.
    let sends: SendCache
    /// Tells the project's APNs pusher that sends committed (it reads which from the ledger).
    let sendsCommitted = WakeSignal()

    init(project: ProjectID) {
        sends = SendCache(project: project)
    }

    /// Wakes devices waiting for the sends at `seqs`, and the pusher.
    func notify(seqs: [UInt64]) {
        notifier.notify(seqs: seqs)
        sendsCommitted.signal()
    }
}
