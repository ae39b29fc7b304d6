import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// One push: the device, the request headers APNs reads, and the payload.
public struct APNsPush: Sendable {
    /// The device token, hex (or a Live Activity's token).
    public var deviceToken: String
    /// `apns-push-type`: `alert`, `background`, `liveactivity`, ….
    public var pushType: String
    /// `apns-priority`: 10 (at once) for alerts, 5 for background pushes.
    public var priority: Int
    /// When the message stops being worth delivering (seconds since 1970): `apns-expiration`, and the end of
    /// this provider's retries.
    public var expiresAt: Double
    /// `apns-collapse-id` (at most 64 bytes).
    public var collapseID: String?
    /// `apns-id`: stable for one message and one device, so that APNs (and an audit) recognise a retry.
    public var apnsID: UUID
    /// The JSON payload (at most 4096 bytes).
    public var payload: [UInt8]
    /// `apns-topic` when it is not the client's (the app's bundle id): `<bundle id>.push-type.liveactivity` for a
    /// Live Activity's push.
    public var topic: String?

    public init(
        deviceToken: String, pushType: String, priority: Int, expiresAt: Double, collapseID: String?, apnsID: UUID,
        payload: [UInt8], topic: String? = nil
    ) {
        self.deviceToken = deviceToken
        self.pushType = pushType
        self.priority = priority
        self.expiresAt = expiresAt
        self.collapseID = collapseID
        self.apnsID = apnsID
        self.payload = payload
        self.topic = topic
    }
}

/// Sends pushes to one APNs endpoint over a few HTTP/2 connections (``APNsConnection``), authenticated by an
/// ``APNsProviderToken``, and turns every documented answer into an ``APNsOutcome``:
///
/// - 429 `TooManyRequests`, 500, 503, a failed connection, GOAWAY or RST_STREAM: retried with exponential backoff
///   and jitter, never past the push's expiry;
/// - 403 `ExpiredProviderToken`: that connection is closed (APNs leaves it unusable), a new token is minted and
///   the push is sent again at once;
/// - 429 `TooManyProviderTokenUpdates`: that connection is closed; a new one, after a backoff;
/// - everything else is final.
///
/// - Note: Thread-safe. Never logs device tokens, provider tokens or payloads.
public final class APNsClient: Sendable {
    public struct Backoff: Sendable {
        public var initial: Double = 1
        public var maximum: Double = 300
        public var jitter: Double = 0.3

        public init(initial: Double = 1, maximum: Double = 300, jitter: Double = 0.3) {
            self.initial = initial
            self.maximum = maximum
            self.jitter = jitter
        }

        /// Seconds before attempt `failures + 1`.
        func delay(afterFailures failures: Int) -> Double {
            let base = min(maximum, initial * pow(2, Double(min(failures - 1, 30))))
            return base * (1 + jitter * Double.random(in: -1...1))
        }
    }

    public let endpoint: String
    public let topic: String
    public let providerToken: APNsProviderToken
    private let host: String
    private let port: Int
    private let tls: NIOSSLContext
    private let backoff: Backoff
    private let now: @Sendable () -> Double
    private let logger: Logger
    /// Called for each attempt APNs left unanswered in time (a connection or a request that timed out).
    private let attemptTimedOut: @Sendable () -> Void
    /// Since when requests have gone unanswered: set by an attempt made while it is `nil`, cleared by any
    /// answer (``silence``).
    private let unansweredSince = Mutex<ContinuousClock.Instant?>(nil)
    /// Connections, each slot connected on first use and again after it closes or goes away.
    private let slots: Mutex<Slots>
    /// The event loops the slots' connections run on, one after another: each connection's HTTP/2 and TLS work
    /// on a thread of its own where there are threads enough (`next()` could put both on one).
    private let loops: [any EventLoop]

    private struct Slots {
        enum Slot {
            case empty
            case connecting(EventLoopFuture<APNsConnection>)
            case connected(APNsConnection)
        }
        var slots: [Slot]
        var next = 0
    }

    /// - Parameters:
    ///   - endpoint: `https://api.push.apple.com` (or the sandbox, a relay, a stand-in), without a path.
    ///   - topic: the app's bundle id (`apns-topic`).
    ///   - additionalTrustRoots: roots trusted beside the system's (the config's `caFile`).
    ///   - connections: how many HTTP/2 connections requests are spread over.
    public init(
        endpoint: String, topic: String, providerToken: APNsProviderToken,
        additionalTrustRoots: [NIOSSLCertificate] = [], connections: Int = 2, backoff: Backoff = Backoff(),
        now: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }, logger: Logger,
        attemptTimedOut: @escaping @Sendable () -> Void = {}
    ) throws {
        guard let url = URLComponents(string: endpoint), url.scheme == "https", let host = url.host, !host.isEmpty
        else { throw APNsClientError("an APNs endpoint is https://host[:port]: \(endpoint)") }
        self.endpoint = endpoint
        self.topic = topic
        self.providerToken = providerToken
        self.host = host
        port = url.port ?? 443
        self.backoff = backoff
        self.now = now
        self.logger = logger
        self.attemptTimedOut = attemptTimedOut
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.minimumTLSVersion = .tlsv12
        tls.applicationProtocols = ["h2"]  // APNs speaks HTTP/2 only
        if !additionalTrustRoots.isEmpty {
            tls.additionalTrustRoots = [.certificates(additionalTrustRoots)]
        }
        self.tls = try NIOSSLContext(configuration: tls)
        slots = Mutex(Slots(slots: Array(repeating: .empty, count: max(1, connections))))
        loops = Array(MultiThreadedEventLoopGroup.singleton.makeIterator())
    }

    /// Sends `push` until APNs gives a final answer or the push expires.
    public func send(_ push: APNsPush) async -> APNsOutcome { await send(push, after: nil) }

    /// What a push's first attempt, made in a batch, came to when it needs another (``send(_:after:)``).
    private enum FirstAttempt {
        /// No answer, or one that asks to try again later: the next attempt waits its backoff.
        case failed(reason: String)
        /// `ExpiredProviderToken`: again at once, with a new token.
        case tokenRenewed
    }

    /// Sends `pushes` together — one hop to a connection's event loop, one resumption when they have all answered
    /// (``APNsConnection/send(batch:timeout:)``) — and returns their outcomes in order. A push whose answer asks for
    /// another attempt, or that got none, goes on alone with the rules of ``send(_:)``, as if its first attempt
    /// had been made there.
    public func send(_ pushes: [APNsPush]) async -> [APNsOutcome] {
        guard pushes.count > 1 else { return pushes.isEmpty ? [] : [await send(pushes[0])] }
        if Task.isCancelled { return pushes.map { _ in .interrupted } }
        var outcomes = [APNsOutcome?](repeating: nil, count: pushes.count)
        var again: [(index: Int, after: FirstAttempt?)] = []
        let live = pushes.indices.filter { now() < pushes[$0].expiresAt }
        do {
            // Nothing to send: no connection, and no request counted as unanswered (``silence``).
            guard !live.isEmpty else { throw CancellationError() }
            let token = try providerToken.current()
            unansweredSince.withLock { $0 = $0 ?? .now }
            let connection = try await self.connection()
            let responses = await connection.send(
                batch: live.map { index in
                    APNsConnection.Request(
                        path: "/3/device/\(pushes[index].deviceToken)", headers: headers(pushes[index], token: token),
                        body: pushes[index].payload)
                })
            var answered = false
            var renew = false
            var reconnect = false
            for (index, response) in zip(live, responses) {
                guard case .success(let response) = response else {
                    if case .failure(let error) = response, (error as? APNsConnection.StreamFailed)?.timedOut == true {
                        attemptTimedOut()
                        again.append((index, .failed(reason: "no answer in time")))
                    } else if case .failure(let error) = response {
                        again.append((index, .failed(reason: "\(type(of: error))")))
                    }
                    continue
                }
                answered = true
                switch APNsReply(status: response.status, body: response.body).action {
                case .done(.accepted):
                    outcomes[index] = .accepted(apnsID: response.apnsID ?? pushes[index].apnsID.uuidString)
                case .done(let outcome): outcomes[index] = outcome
                case .retry(let reason): again.append((index, .failed(reason: reason)))
                case .renewProviderToken:
                    renew = true
                    again.append((index, .tokenRenewed))
                case .reconnectLater:
                    reconnect = true
                    again.append((index, .failed(reason: "TooManyProviderTokenUpdates")))
                }
            }
            if answered { unansweredSince.withLock { $0 = nil } }
            if renew { providerToken.dropExpired(token) }
            if renew || reconnect { retire(connection) }
        } catch {
            // No token or no connection: each push goes through the single path, which reports why (none when
            // every push has expired).
            again = live.map { ($0, nil) }
        }
        for index in pushes.indices where !live.contains(index) {
            outcomes[index] = .expired(lastReason: "not sent")
        }
        if !again.isEmpty {
            await withTaskGroup(of: (Int, APNsOutcome).self) { group in
                for (index, first) in again {
                    group.addTask { (index, await self.send(pushes[index], after: first)) }
                }
                for await (index, outcome) in group { outcomes[index] = outcome }
            }
        }
        return outcomes.map { $0 ?? .interrupted }
    }

    /// Sends `push` until APNs gives a final answer or the push expires; when its first attempt was made in a batch,
    /// `first` says what came of it.
    private func send(_ push: APNsPush, after first: FirstAttempt?) async -> APNsOutcome {
        var failures = 0
        var lastReason = "not sent"
        var renewedAfterExpiry = false
        switch first {
        case .none: break
        case .tokenRenewed: renewedAfterExpiry = true
        case .failed(let reason):
            lastReason = reason
            failures = 1
            if let stop = await wait(afterFailures: failures, before: push.expiresAt, lastReason: lastReason) {
                return stop
            }
        }
        while true {
            if now() >= push.expiresAt { return .expired(lastReason: lastReason) }
            if Task.isCancelled { return .interrupted }
            let token: String
            do {
                token = try providerToken.current()
            } catch {
                return .providerTokenInvalid(reason: "the provider token cannot be signed: \(error)")
            }
            let connection: APNsConnection
            let response: APNsConnection.Response
            unansweredSince.withLock { $0 = $0 ?? .now }
            do {
                connection = try await self.connection()
                response = try await connection.send(
                    APNsConnection.Request(
                        path: "/3/device/\(push.deviceToken)", headers: headers(push, token: token),
                        body: push.payload))
                unansweredSince.withLock { $0 = nil }
            } catch {
                // No connection, GOAWAY, RST_STREAM, a timeout: the push may not have arrived.
                lastReason = "\(type(of: error))"
                if (error as? APNsConnection.StreamFailed)?.timedOut == true
                    || (error as? ChannelError).map({ if case .connectTimeout = $0 { true } else { false } }) == true
                {
                    lastReason = "no answer in time"
                    attemptTimedOut()
                }
                failures += 1
                if let stop = await wait(afterFailures: failures, before: push.expiresAt, lastReason: lastReason) {
                    return stop
                }
                continue
            }
            switch APNsReply(status: response.status, body: response.body).action {
            case .done(.accepted):
                return .accepted(apnsID: response.apnsID ?? push.apnsID.uuidString)
            case .done(let outcome):
                return outcome
            case .retry(let reason):
                lastReason = reason
                failures += 1
                if let stop = await wait(afterFailures: failures, before: push.expiresAt, lastReason: lastReason) {
                    return stop
                }
            case .renewProviderToken:
                lastReason = "ExpiredProviderToken"
                providerToken.dropExpired(token)
                retire(connection)
                // At once the first time; a token refused as expired again at once means a clock far off:
                // back off like any failure.
                if renewedAfterExpiry {
                    failures += 1
                    if let stop = await wait(afterFailures: failures, before: push.expiresAt, lastReason: lastReason) {
                        return stop
                    }
                }
                renewedAfterExpiry = true
            case .reconnectLater:
                lastReason = "TooManyProviderTokenUpdates"
                retire(connection)
                failures += 1
                if let stop = await wait(afterFailures: failures, before: push.expiresAt, lastReason: lastReason) {
                    return stop
                }
            }
        }
    }

    /// How long requests have gone unanswered (a timeout, a connection that never opened) since APNs last
    /// answered; `nil` when it answers, or has not been asked since it last did.
    public var silence: Duration? { unansweredSince.withLock { $0 }.map { .now - $0 } }

    /// Forgets the requests that went unanswered: nothing is owed now.
    public func idle() { unansweredSince.withLock { $0 = nil } }

    /// Closes every connection.
    public func shutdown() async {
        let held = slots.withLock { state in
            defer { state.slots = state.slots.map { _ in .empty } }
            return state.slots
        }
        for slot in held {
            switch slot {
            case .empty: break
            case .connecting(let future): (try? await future.get())?.close()
            case .connected(let connection): connection.close()
            }
        }
    }

    private func headers(_ push: APNsPush, token: String) -> [(String, String)] {
        var headers = [
            ("authorization", "bearer \(token)"), ("apns-topic", push.topic ?? topic),
            ("apns-push-type", push.pushType),
            ("apns-priority", String(push.priority)),
            ("apns-expiration", String(Int64(max(0, min(push.expiresAt, 9e15))))),
            ("apns-id", push.apnsID.uuidString.lowercased()), ("content-type", "application/json"),
        ]
        if let collapseID = push.collapseID { headers.append(("apns-collapse-id", collapseID)) }
        return headers
    }

    /// A usable connection: the next slot's, connected (again) when it has none, or it closed or went away.
    private func connection() async throws -> APNsConnection {
        enum Found {
            case ready(APNsConnection)
            case pending(index: Int, EventLoopFuture<APNsConnection>)
        }
        let found = slots.withLock { state -> Found in
            let index = state.next % state.slots.count
            state.next &+= 1
            switch state.slots[index] {
            case .connecting(let future):
                return .pending(index: index, future)
            case .connected(let connection) where connection.isUsable:
                return .ready(connection)
            case .connected, .empty:
                let future = APNsConnection.connect(host: host, port: port, tls: tls, on: loops[index % loops.count])
                state.slots[index] = .connecting(future)
                return .pending(index: index, future)
            }
        }
        let index: Int
        let future: EventLoopFuture<APNsConnection>
        switch found {
        case .ready(let connection): return connection
        case .pending(let slot, let pending): (index, future) = (slot, pending)
        }
        do {
            let connection = try await future.get()
            slots.withLock { state in
                if case .connecting(let pending) = state.slots[index], pending === future {
                    state.slots[index] = .connected(connection)
                }
            }
            return connection
        } catch {
            slots.withLock { state in
                if case .connecting(let pending) = state.slots[index], pending === future {
                    state.slots[index] = .empty
                }
            }
            throw error
        }
    }

    /// Closes `connection` and empties its slot, so that the next request connects again.
    private func retire(_ connection: APNsConnection) {
        slots.withLock { state in
            for index in state.slots.indices {
                if case .connected(let held) = state.slots[index], held === connection { state.slots[index] = .empty }
            }
        }
        connection.close()
        logger.notice("APNs connection replaced", metadata: ["ledger.apnsEndpoint": "\(endpoint)"])
    }

    /// Sleeps before the next attempt; the outcome to stop with instead when the next attempt would be past
    /// `deadline` (`expired`) or the task is cancelled (`interrupted`).
    private func wait(afterFailures failures: Int, before deadline: Double, lastReason: String) async -> APNsOutcome? {
        let delay = backoff.delay(afterFailures: failures)
        guard now() + delay < deadline else { return .expired(lastReason: lastReason) }
        do {
            try await Task.sleep(for: .seconds(delay))
            return nil
        } catch {
            return .interrupted
        }
    }
}

/// An APNs client that cannot be made (a malformed endpoint, TLS settings NIOSSL refuses).
public struct APNsClientError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
