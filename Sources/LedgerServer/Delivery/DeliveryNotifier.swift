import Foundation
import ServiceLifecycle
import Synchronization
import LedgerCore
import LedgerStore
import LedgerQueries

/// Wakes the devices waiting for messages (long polls and streams) that a committed send is addressed to.
///
/// The writer's thread only hands over the new sends' seqs (it never blocks); a ``SerialWorker`` of the
/// project computes each send's audience once (``SendCache``, LMDB reads kept off the cooperative pool) and
/// resumes exactly the waiting devices in it — a send to a topic with a thousand subscribers wakes a thousand
/// streams, not every open stream of the project.
///
/// A generation counter closes the race between "read the inbox, found nothing" and "wait": a waiter passes
/// the generation it read before looking, and returns at once if sends committed since.
///
/// Waiting costs one continuation: timeouts are kept as deadlines, and ``DeliverySweeper`` (a service of the
/// server) resumes the expired waiters of every project each ``sweepInterval`` (a timer task per wait cost
/// more CPU than the delivery itself when a send woke a thousand streams), so a wait may last up to one
/// interval longer than asked.
///
/// - Note: Thread-safe.
final class DeliveryNotifier: Sendable {
    static let sweepInterval: Duration = .milliseconds(100)

    private let waiters = Waiters()
    /// Computes the audiences of committed sends and wakes their waiters, in commit order.
    private let dispatcher: SerialWorker<UInt64, Void>

    init() {
        dispatcher = SerialWorker(name: "ledger-delivery", state: ()) { [waiters] _, seqs in
            waiters.dispatch(seqs)
        }
    }

    /// The current generation: read it before looking at the inbox.
    var current: UInt64 { waiters.state.withLock { $0.generation } }

    /// How to compute the audiences of committed sends (the project's ledger and send cache).
    func connect(audiences: @escaping @Sendable ([UInt64]) throws -> [InstanceSet]) {
        waiters.state.withLock { $0.audiences = audiences }
    }

    /// Sends committed at `seqs` (called on the writer's thread): bump the generation and hand the seqs to
    /// the dispatcher. With nobody waiting the sends are dropped without computing their audiences: a device
    /// that starts waiting later read the generation before it looked at its inbox, and either that look
    /// found the send or the generation has moved since and its wait returns at once.
    func notify(seqs: [UInt64]) {
        let anyoneWaiting = waiters.state.withLock { state in
            state.generation &+= 1
            return !state.entries.isEmpty
        }
        if anyoneWaiting { dispatcher.enqueue(contentsOf: seqs) }
    }

    /// Wakes `instance`'s waiters: its registration has ended, and its streams and polls must see that now
    /// rather than at their next keep-alive. The generation moves too, so a stream that read "registered"
    /// just before the unregistration committed does not start waiting.
    func wake(_ instance: InstanceID) {
        let woken = waiters.state.withLock { state in
            state.generation &+= 1
            return state.take { $0.instance == instance }
        }
        for continuation in woken { continuation.resume() }
    }

    /// Wakes every waiter (the server is stopping).
    func wakeAll() {
        let woken = waiters.state.withLock { state in
            state.generation &+= 1
            defer {
                state.entries.removeAll()
                state.continuations.removeAll()
            }
            return Array(state.continuations.values)
        }
        for continuation in woken { continuation.resume() }
    }

    /// Resumes the waiters whose deadline is at or before `now` (``DeliverySweeper``).
    func sweep(now: ContinuousClock.Instant) {
        let expired = waiters.state.withLock { state in state.take { $0.deadline <= now } }
        for continuation in expired { continuation.resume() }
    }

    /// Returns when a send addressed to `instance` commits after `seen`, after `timeout` (give or take
    /// ``sweepInterval``), or on cancellation.
    func wait(for instance: InstanceID, after seen: UInt64, timeout: Duration) async {
        let deadline = ContinuousClock.now + timeout
        let id = waiters.state.withLock { state in
            state.nextWaiter &+= 1
            return state.nextWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let immediate = waiters.state.withLock { state in
                    if state.generation != seen || Task.isCancelled { return true }
                    state.entries[id] = Waiter(instance: instance, deadline: deadline)
                    state.continuations[id] = continuation
                    return false
                }
                if immediate { continuation.resume() }
            }
        } onCancel: {
            let continuation = waiters.state.withLock { state in
                state.entries[id] = nil
                return state.continuations.removeValue(forKey: id)
            }
            continuation?.resume()
        }
    }

    /// Whom a waiter waits for, and until when: plain values, so that choosing whom to wake among thousands of
    /// waiters copies no reference (copying the continuations with them was most of the dispatcher's time).
    private struct Waiter {
        let instance: InstanceID
        let deadline: ContinuousClock.Instant
    }

    /// The waiting devices, shared by the notifier and its dispatcher.
    private final class Waiters: Sendable {
        struct State {
            var generation: UInt64 = 0
            var entries: [UInt64: Waiter] = [:]
            /// Each waiter's continuation, under the same id as its entry.
            var continuations: [UInt64: CheckedContinuation<Void, Never>] = [:]
            var nextWaiter: UInt64 = 0
            /// Reads the ledger to find each send's audience; set when the project's ledger opens.
            var audiences: (@Sendable ([UInt64]) throws -> [InstanceSet])?

            /// Removes the waiters that `chosen` picks and returns their continuations.
            mutating func take(where chosen: (Waiter) -> Bool) -> [CheckedContinuation<Void, Never>] {
                var taken: [UInt64] = []
                for (id, waiter) in entries where chosen(waiter) { taken.append(id) }
                return taken.compactMap { id in
                    entries[id] = nil
                    return continuations.removeValue(forKey: id)
                }
            }
        }

        let state = Mutex(State())

        /// Resumes the waiters in the audiences of `seqs` (on the dispatcher's thread).
        func dispatch(_ seqs: [UInt64]) {
            let compute = state.withLock { $0.entries.isEmpty ? nil : $0.audiences }
            guard let compute else { return }
            // If the audiences cannot be read, wake everyone: each device then reads its own inbox.
            let sets = try? compute(seqs)
            let woken = state.withLock { state in
                state.take { waiter in sets.map { $0.contains { $0.contains(waiter.instance) } } ?? true }
            }
            for continuation in woken { continuation.resume() }
        }
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
    /// Each recent send's Server-Sent Event, rendered once and written to every streaming device that gets it.
    let events: RenderedEvents

    init(project: ProjectID) {
        sends = SendCache(project: project)
        events = RenderedEvents(project: project)
    }

    /// Forgets what was prepared from the log's sends (their seqs are about to stand for other events).
    func forgetPreparedSends() {
        sends.removeAll()
        events.removeAll()
    }

    /// Wakes devices waiting for the sends at `seqs`, and the pusher.
    func notify(seqs: [UInt64]) {
        notifier.notify(seqs: seqs)
        sendsCommitted.signal()
    }
}
