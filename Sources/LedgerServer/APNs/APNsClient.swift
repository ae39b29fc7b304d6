import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL
import Synchronization

/// One push: the device, the request headers APNs reads, and the payload.
struct APNsPush: Sendable {
    /// The device token, hex.
    var deviceToken: String
    /// `apns-push-type`: `alert` or `background`.
    var pushType: String
    /// `apns-priority`: 10 (at once) for alerts, 5 for background pushes.
    var priority: Int
    /// When the message stops being worth delivering (seconds since 1970): `apns-expiration`, and the end of
    /// this provider's retries.
    var expiresAt: Double
    /// `apns-collapse-id` (at most 64 bytes).
    var collapseID: String?
    /// `apns-id`: stable for one message and one device, so that APNs (and an audit) recognise a retry.
    var apnsID: UUID
    /// The JSON payload (at most 4096 bytes).
    var payload: [UInt8]
}

/// Sends pushes to one APNs endpoint over HTTP/2 (AsyncHTTPClient, which multiplexes requests over its
/// connections and follows the stream limit each connection announces — APNs allows one stream until a request
/// has gone through), authenticated by an ``APNsProviderToken``, and turns every documented answer into an
/// ``APNsOutcome``:
///
/// - 429 `TooManyRequests`, 500, 503, a failed connection, GOAWAY or RST_STREAM: retried with exponential backoff
///   and jitter, never past the push's expiry;
/// - 403 `ExpiredProviderToken`: the connections are closed (APNs leaves them unusable), a new token is minted
///   and the push is sent again at once;
/// - 429 `TooManyProviderTokenUpdates`: new connections, after a backoff;
/// - everything else is final.
///
/// - Note: Thread-safe. Never logs device tokens, provider tokens or payloads.
final class APNsClient: Sendable {
    struct Backoff: Sendable {
        var initial: Double = 1
        var maximum: Double = 300
        var jitter: Double = 0.3

        /// Seconds before attempt `failures + 1`.
        func delay(afterFailures failures: Int) -> Double {
            let base = min(maximum, initial * pow(2, Double(min(failures - 1, 30))))
            return base * (1 + jitter * Double.random(in: -1...1))
        }
    }

    let endpoint: String
    let topic: String
    let providerToken: APNsProviderToken
    private let backoff: Backoff
    private let now: @Sendable () -> Double
    private let configuration: HTTPClient.Configuration
    private let client: Mutex<HTTPClient>
    private let logger: Logger

    /// - Parameters:
    ///   - endpoint: `https://api.push.apple.com` (or the sandbox, a relay, a stand-in), without a path.
    ///   - topic: the app's bundle id (`apns-topic`).
    ///   - additionalTrustRoots: roots trusted beside the system's (the config's `caFile`).
    init(
        endpoint: String, topic: String, providerToken: APNsProviderToken,
        additionalTrustRoots: [NIOSSLCertificate] = [], backoff: Backoff = Backoff(),
        now: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }, logger: Logger
    ) {
        self.endpoint = endpoint.hasSuffix("/") ? String(endpoint.dropLast()) : endpoint
        self.topic = topic
        self.providerToken = providerToken
        self.backoff = backoff
        self.now = now
        self.logger = logger
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.minimumTLSVersion = .tlsv12
        if !additionalTrustRoots.isEmpty {
            tls.additionalTrustRoots = [.certificates(additionalTrustRoots)]
        }
        var configuration = HTTPClient.Configuration(
            tlsConfiguration: tls, timeout: .init(connect: .seconds(10), read: .seconds(30)))
        configuration.httpVersion = .automatic  // HTTP/2 by ALPN: APNs speaks nothing else
        self.configuration = configuration
        client = Mutex(HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration))
    }

    /// Sends `push` until APNs gives a final answer or the push expires.
    func send(_ push: APNsPush) async -> APNsOutcome {
        var failures = 0
        var lastReason = "not sent"
        var renewedAfterExpiry = false
        while true {
            if now() >= push.expiresAt { return .expired(lastReason: lastReason) }
            let connection = client.withLock { $0 }
            let token: String
            do {
                token = try providerToken.current()
            } catch {
                return .providerTokenInvalid(reason: "the provider token cannot be signed: \(error)")
            }
            let answer: (reply: APNsReply, apnsID: String?)
            do {
                answer = try await execute(push, token: token, on: connection)
            } catch {
                // A failed connection, GOAWAY, RST_STREAM, a timeout: the push may not have arrived.
                lastReason = "\(type(of: error))"
                failures += 1
                if let stop = await wait(afterFailures: failures, before: push.expiresAt, lastReason: lastReason) {
                    return stop
                }
                continue
            }
            switch answer.reply.action {
            case .done(.accepted):
                return .accepted(apnsID: answer.apnsID ?? push.apnsID.uuidString)
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
                reconnect(replacing: connection)
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
                reconnect(replacing: connection)
                failures += 1
                if let stop = await wait(afterFailures: failures, before: push.expiresAt, lastReason: lastReason) {
                    return stop
                }
            }
        }
    }

    /// Closes every connection.
    func shutdown() async throws {
        try await client.withLock { $0 }.shutdown()
    }

    private func execute(_ push: APNsPush, token: String, on connection: HTTPClient) async throws -> (
        reply: APNsReply, apnsID: String?
    ) {
        var request = HTTPClientRequest(url: "\(endpoint)/3/device/\(push.deviceToken)")
        request.method = .POST
        request.headers.add(name: "authorization", value: "bearer \(token)")
        request.headers.add(name: "apns-topic", value: topic)
        request.headers.add(name: "apns-push-type", value: push.pushType)
        request.headers.add(name: "apns-priority", value: String(push.priority))
        request.headers.add(name: "apns-expiration", value: String(Int64(max(0, min(push.expiresAt, 9e15)))))
        if let collapseID = push.collapseID { request.headers.add(name: "apns-collapse-id", value: collapseID) }
        request.headers.add(name: "apns-id", value: push.apnsID.uuidString)
        request.headers.add(name: "content-type", value: "application/json")
        request.body = .bytes(ByteBuffer(bytes: push.payload))
        let response = try await connection.execute(request, timeout: .seconds(30))
        // Error bodies are a small JSON object; anything larger is not APNs.
        let body = try await response.body.collect(upTo: 64 * 1024)
        return (
            APNsReply(status: Int(response.status.code), body: Array(buffer: body)),
            response.headers.first(name: "apns-id")
        )
    }

    /// Replaces the connections of `failed` with new ones (once, however many requests saw it fail); its
    /// requests still under way fail and are retried.
    private func reconnect(replacing failed: HTTPClient) {
        let replaced = client.withLock { current -> HTTPClient? in
            guard current === failed else { return nil }
            current = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
            return failed
        }
        if let replaced {
            logger.notice("APNs connections replaced", metadata: ["ledger.apnsEndpoint": "\(endpoint)"])
            replaced.shutdown { _ in }
        }
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
