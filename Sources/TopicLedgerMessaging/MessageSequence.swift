import Foundation

/// The device's messages as an `AsyncSequence`. Iterating registers the device if needed and connects —
/// Server-Sent Events, reconnecting from the last event id it received; long poll when the stream cannot be
/// opened (a proxy that does not pass `text/event-stream`). A message is acknowledged when the loop asks for
/// the next one, so a message whose handler did not return (the app was killed) is delivered again on the next
/// launch: at least once, never lost. Acknowledgements are cumulative and sent when the loop has caught up (or
/// every 100 messages), not one request per message.
///
/// The sequence ends with ``MessagingError/unregistered`` when the registration was deleted and auto-init is
/// off (with auto-init the library registers a new token and goes on), or with
/// ``MessagingError/authentication(_:)``; other failures are retried with backoff.
public struct MessageSequence: AsyncSequence, Sendable {
    public typealias Element = RemoteMessage
    let messaging: Messaging
    let acknowledgement: Acknowledgement

    /// Who acknowledges: the sequence, when the app asks for the next message, or the app itself.
    public enum Acknowledgement: Sendable {
        case automatic, manual
    }

    public func makeAsyncIterator() -> Iterator {
        Iterator(
            lifetime: ReceiverLifetime(MessageReceiver(messaging: messaging)),
            acknowledges: acknowledgement == .automatic)
    }

    public struct Iterator: AsyncIteratorProtocol {
        let lifetime: ReceiverLifetime
        let acknowledges: Bool
        private var previous: RemoteMessage?

        init(lifetime: ReceiverLifetime, acknowledges: Bool) {
            self.lifetime = lifetime
            self.acknowledges = acknowledges
        }

        public mutating func next() async throws -> RemoteMessage? {
            if let previous, acknowledges { lifetime.receiver.handled(previous) }
            previous = try await lifetime.receiver.next()
            return previous
        }
    }
}

/// Stops the receiver's connection when the last copy of its iterator goes away.
final class ReceiverLifetime: Sendable {
    let receiver: MessageReceiver
    init(_ receiver: MessageReceiver) { self.receiver = receiver }
    deinit { receiver.stop() }
}

/// The connection behind a ``MessageSequence``: a producer task fills a buffer, `next()` takes from it.
final class MessageReceiver: @unchecked Sendable {
    // @unchecked: every `var` is touched with `lock` held; the lock is never held across an `await`.
    private let messaging: Messaging
    private let lock = NSLock()
    private var buffer: [RemoteMessage] = []
    private var head = 0
    private var waiter: CheckedContinuation<RemoteMessage?, any Error>?
    private var ending: Result<Void, any Error>?
    private var producer: Task<Void, Never>?
    private var stopped = false
    /// The last message the app finished with, and the last acknowledged cursor, per token.
    private var handledMessage: RemoteMessage?
    private var handledSinceAcknowledgement = 0
    static let acknowledgementBatch = 100

    init(messaging: Messaging) { self.messaging = messaging }

    func stop() {
        let waiting = lock.locked {
            stopped = true
            producer?.cancel()
            defer { waiter = nil }
            return waiter
        }
        waiting?.resume(returning: nil)
    }

    func handled(_ message: RemoteMessage) {
        lock.locked {
            handledMessage = message
            handledSinceAcknowledgement += 1
        }
    }

    func next() async throws -> RemoteMessage? {
        lock.locked {
            if producer == nil && !stopped { producer = Task { await self.produce() } }
        }
        await acknowledgeIfDue()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<RemoteMessage?, Error>) in
                let ready = lock.locked { () -> Result<RemoteMessage?, any Error>? in
                    if head < buffer.count {
                        let message = buffer[head]
                        head += 1
                        if head > 1024 && head * 2 > buffer.count {
                            buffer.removeFirst(head)
                            head = 0
                        }
                        return .success(message)
                    }
                    if stopped { return .success(nil) }
                    if let ending {
                        self.ending = .success(())
                        return ending.map { nil }
                    }
                    waiter = continuation
                    return nil
                }
                if let ready { continuation.resume(with: ready) }
            }
        } onCancel: {
            stop()
        }
    }

    /// Acknowledges the last handled message when the app has caught up with the buffer, or after a batch.
    /// A failed acknowledgement is left for the next one (they are cumulative).
    private func acknowledgeIfDue() async {
        let due = lock.locked { () -> RemoteMessage? in
            guard let message = handledMessage,
                head >= buffer.count || handledSinceAcknowledgement >= Self.acknowledgementBatch
            else { return nil }
            return message
        }
        guard let due else { return }
        do {
            try await messaging.acknowledge(due)
            lock.locked {
                if handledMessage == due {
                    handledMessage = nil
                    handledSinceAcknowledgement = 0
                }
            }
        } catch {
            // Delivered again later if never acknowledged: at least once.
        }
    }

    private func deliver(_ message: RemoteMessage) {
        // Handed over through APNs already: acknowledged with the next one, never shown twice.
        guard messaging.streamDelivery(of: message.messageID) else {
            handled(message)
            return
        }
        let waiting = lock.locked { () -> CheckedContinuation<RemoteMessage?, any Error>? in
            if let waiter {
                self.waiter = nil
                return waiter
            }
            buffer.append(message)
            return nil
        }
        waiting?.resume(returning: message)
    }

    private func end(_ result: Result<Void, any Error>) {
        let waiting = lock.locked { () -> CheckedContinuation<RemoteMessage?, any Error>? in
            ending = result
            defer { waiter = nil }
            return waiter
        }
        if let waiting {
            lock.locked { ending = .success(()) }
            waiting.resume(with: result.map { nil })
        }
    }

    // MARK: - The connection

    private enum Mode { case stream, poll }

    private func produce() async {
        let api = messaging.api
        let configuration = messaging.configuration
        var mode = Mode.stream
        var failures = 0
        var token: String
        do {
            token = try await messaging.token()
        } catch {
            return end(.failure(error))
        }
        // The last message delivered on `token`: where a reconnect starts, and what is never delivered twice.
        var last: UInt64?
        func take(_ message: RemoteMessage) throws {
            guard let cursor = UInt64(message.cursor) else {
                throw MessagingError.unexpectedResponse(status: 200, "a delivery whose cursor is not a number")
            }
            if let last, cursor <= last { return }
            last = cursor
            var message = message
            message.registrationToken = token
            deliver(message)
        }
        while !Task.isCancelled {
            do {
                switch mode {
                case .stream:
                    let request = api.streamRequest(token, lastEventID: last.map(String.init))
                    let connection = try await EventStreamConnection.open(
                        request, configuration: messaging.streamSessionConfiguration)
                    defer { connection.close() }
                    var parser = ServerSentEventParser()
                    var received = false
                    for try await chunk in connection.chunks {
                        for event in try parser.feed(chunk) where event.event == "message" {
                            try take(try RemoteMessage(delivery: Data(event.data.utf8)))
                            received = true
                        }
                    }
                    // The server ended the stream (it is stopping, or the device was unregistered): reconnect,
                    // at once if this connection was useful.
                    if !received {
                        try await sleep(seconds: configuration.retry.delay(afterFailure: failures, retryAfter: nil))
                        failures += 1
                    } else {
                        failures = 0
                    }
                case .poll:
                    let page = try await api.poll(
                        token, after: last.map(String.init), wait: configuration.pollWaitSeconds)
                    for message in page.messages { try take(message) }
                    if let through = UInt64(page.cursor), through > (last ?? 0) { last = through }
                    failures = 0
                }
            } catch let refusal as EventStreamConnection.Refusal {
                switch refusal.error {
                case .unregistered, .authentication, .invalidArgument:
                    if await !recover(from: refusal.error, token: &token, last: &last) { return }
                    // Recovered (a new token, or no Last-Event-ID); if it keeps happening, not in a tight loop.
                    if failures > 0 {
                        guard await backOff(refusal.error, failures: &failures) else { return }
                    } else {
                        failures += 1
                    }
                case let error where error.isRetryable:
                    guard await backOff(error, failures: &failures) else { return }
                default:
                    // Not a stream (a proxy's page, 404 or 405 from something in between): long poll.
                    mode = .poll
                }
            } catch let error as MessagingError {
                if error.isRetryable {
                    guard await backOff(error, failures: &failures) else { return }
                } else if await !recover(from: error, token: &token, last: &last) {
                    return
                } else if failures > 0 {
                    guard await backOff(error, failures: &failures) else { return }
                } else {
                    failures += 1
                }
            } catch {
                return end(.failure(error))
            }
        }
    }

    /// A new token after the registration was deleted (auto-init), a stream from the acknowledgement cursor
    /// after a refused `Last-Event-ID`; otherwise the sequence ends with `error`.
    private func recover(from error: MessagingError, token: inout String, last: inout UInt64?) async -> Bool {
        switch error {
        case .unregistered where messaging.configuration.isAutoInitEnabled:
            messaging.forget(token)
            do {
                token = try await messaging.newToken(replacing: token)
                last = nil
                return true
            } catch {
                end(.failure(error))
                return false
            }
        case .invalidArgument where last != nil:
            last = nil
            return true
        default:
            end(.failure(error))
            return false
        }
    }

    private func backOff(_ error: MessagingError, failures: inout Int) async -> Bool {
        do {
            try await sleep(
                seconds: messaging.configuration.retry.delay(afterFailure: failures, retryAfter: error.retryAfter))
            failures += 1
            return true
        } catch {
            return false
        }
    }
}
