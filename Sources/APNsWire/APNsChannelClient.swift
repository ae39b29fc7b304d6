import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// Apple's iOS 18 broadcast channels for one app: channel management ("Sending channel management requests to
/// APNs": create, read, delete, list at `channelEndpoint`) and broadcasts ("Sending broadcast push notification
/// requests to APNs": `POST /4/broadcasts/apps/<bundle id>` at `broadcastEndpoint`).
///
/// One HTTP/2 connection per endpoint, made on first use and again after it closes or goes away. A request is
/// sent once, and again at once on a new connection after `403 ExpiredProviderToken` (with a new provider token);
/// every other answer is the caller's (``Answer``), and a request that got none throws ``NoAnswer``, for the caller
/// to say so (and whether the request may have reached Apple).
///
/// - Note: Thread-safe. Never logs provider tokens, channel payloads or broadcast payloads.
public final class APNsChannelClient: Sendable {
    /// What Apple answered.
    public struct Answer: Sendable, Equatable {
        public var status: Int
        /// Apple's `reason` of a refusal.
        public var reason: String?
        /// `apns-request-id`.
        public var requestID: String?
        /// `apns-channel-id` (a creation's new channel).
        public var channelID: String?
        /// The body (a channel's settings, the list of channels).
        public var body: [UInt8]
        /// `Retry-After` in seconds (a 429 or 5xx may carry one), when it is a whole number of seconds up to
        /// ``maximumRetryAfter``; an HTTP date or anything else is `nil`.
        public var retryAfter: Int?

        public var succeeded: Bool { (200..<300).contains(status) }

        /// Apple's answer, its strings bounded as the ledger keeps them forever and logs them: `reason` at most
        /// ``maximumReasonBytes`` of `[A-Za-z0-9_.-]` and `requestID` UUID-shaped, each else `nil`.
        public init(
            status: Int, reason: String? = nil, requestID: String? = nil, channelID: String? = nil, body: [UInt8] = [],
            retryAfter: String? = nil
        ) {
            self.status = status
            self.reason = reason.flatMap(Self.boundedReason)
            self.requestID = requestID.flatMap(Self.boundedRequestID)
            self.channelID = channelID
            self.body = body
            self.retryAfter = retryAfter.flatMap(Self.boundedRetryAfter)
        }

        public static let maximumReasonBytes = 64
        /// The longest `Retry-After` taken as given (an hour); a longer one is taken as this.
        public static let maximumRetryAfter = 3600

        /// `Retry-After` as whole seconds (1 to 9 digits), at most ``maximumRetryAfter``; else `nil`.
        public static func boundedRetryAfter(_ value: String) -> Int? {
            let digits = value.utf8
            guard !digits.isEmpty, digits.count <= 9, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                let seconds = Int(value)
            else { return nil }
            return min(seconds, maximumRetryAfter)
        }

        /// `reason` when it is 1 to ``maximumReasonBytes`` bytes of `[A-Za-z0-9_.-]` (Apple's reasons are
        /// `ChannelNotRegistered`, `BadExpirationDate`, …), else `nil`.
        public static func boundedReason(_ reason: String) -> String? {
            let bytes = reason.utf8
            guard !bytes.isEmpty, bytes.count <= maximumReasonBytes,
                bytes.allSatisfy({ byte in
                    (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                        || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-")
                })
            else { return nil }
            return reason
        }

        /// `requestID` when it is UUID-shaped (`8-4-4-4-12` hex digits, as Apple gives `apns-request-id`), else
        /// `nil`.
        public static func boundedRequestID(_ requestID: String) -> String? {
            let bytes = Array(requestID.utf8)
            guard bytes.count == 36 else { return nil }
            for (index, byte) in bytes.enumerated() {
                if [8, 13, 18, 23].contains(index) {
                    guard byte == UInt8(ascii: "-") else { return nil }
                } else {
                    guard (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x46) || (byte >= 0x61 && byte <= 0x66)
                    else { return nil }
                }
            }
            return requestID
        }
    }

    /// The answer did not come: no connection, a reset stream, a timeout.
    public struct NoAnswer: Error, CustomStringConvertible {
        public let description: String
        /// Whether the request was handed to a connection before its answer failed to come (a reset stream, a
        /// timeout, the connection lost): then Apple may have done what it asked — made or deleted a channel —
        /// without saying so. `false`: it never left (no connection, no provider token).
        public let mayHaveArrived: Bool

        public init(description: String, mayHaveArrived: Bool) {
            self.description = description
            self.mayHaveArrived = mayHaveArrived
        }
    }

    private let bundleID: String
    private let providerToken: APNsProviderToken
    private let management: Endpoint
    private let broadcasts: Endpoint
    /// Since when broadcasts have gone unanswered: set by a broadcast that got no answer while it is `nil`, cleared
    /// by any answer to one (``broadcastSilence``).
    private let broadcastsUnansweredSince = Mutex<ContinuousClock.Instant?>(nil)

    /// - Parameters:
    ///   - channelEndpoint: Apple's channel management host (`https://host[:port]`).
    ///   - broadcastEndpoint: where broadcasts go.
    ///   - bundleID: the app's bundle id (the path's `<bundle id>`).
    ///   - additionalTrustRoots: roots trusted beside the system's (the config's `caFile`).
    public init(
        channelEndpoint: String, broadcastEndpoint: String, bundleID: String, providerToken: APNsProviderToken,
        additionalTrustRoots: [NIOSSLCertificate] = []
    ) throws {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.minimumTLSVersion = .tlsv12
        tls.applicationProtocols = ["h2"]
        if !additionalTrustRoots.isEmpty {
            tls.additionalTrustRoots = [.certificates(additionalTrustRoots)]
        }
        let context = try NIOSSLContext(configuration: tls)
        management = try Endpoint(channelEndpoint, tls: context)
        broadcasts = try Endpoint(broadcastEndpoint, tls: context)
        self.bundleID = bundleID
        self.providerToken = providerToken
    }

    /// Creates a Live Activity channel (`POST /1/apps/<bundle id>/channels`); its id is the answer's
    /// ``Answer/channelID`` (201).
    public func createChannel(messageStoragePolicy: Int) async throws -> Answer {
        let body = #"{"message-storage-policy":\#(messageStoragePolicy),"push-type":"LiveActivity"}"#
        return try await send(
            management, method: "POST", path: "/1/apps/\(bundleID)/channels",
            headers: [("content-type", "application/json")], body: Array(body.utf8))
    }

    /// Reads a channel's settings (`GET /1/apps/<bundle id>/channels`, `apns-channel-id`).
    public func readChannel(_ channelID: String) async throws -> Answer {
        try await send(
            management, method: "GET", path: "/1/apps/\(bundleID)/channels", headers: [("apns-channel-id", channelID)])
    }

    /// Deletes a channel (`DELETE /1/apps/<bundle id>/channels`, `apns-channel-id`; 204).
    public func deleteChannel(_ channelID: String) async throws -> Answer {
        try await send(
            management, method: "DELETE", path: "/1/apps/\(bundleID)/channels",
            headers: [("apns-channel-id", channelID)])
    }

    /// Lists the app's channels (`GET /1/apps/<bundle id>/all-channels`).
    public func listChannels() async throws -> Answer {
        try await send(management, method: "GET", path: "/1/apps/\(bundleID)/all-channels", headers: [])
    }

    /// Broadcasts `payload` on a channel (`POST /4/broadcasts/apps/<bundle id>`, `apns-push-type: liveactivity`).
    ///
    /// - Parameters:
    ///   - priority: `apns-priority`, 5 or 10.
    ///   - expiration: `apns-expiration` (seconds since 1970; 0 for a channel that stores nothing).
    ///   - requestID: `apns-request-id`, the same on every attempt.
    public func broadcast(
        channelID: String, priority: Int, expiration: Int64, requestID: UUID, payload: [UInt8]
    ) async throws -> Answer {
        do {
            let answer = try await send(
                broadcasts, method: "POST", path: "/4/broadcasts/apps/\(bundleID)",
                headers: [
                    ("apns-channel-id", channelID), ("apns-push-type", "liveactivity"),
                    ("apns-priority", String(priority)), ("apns-expiration", String(max(0, expiration))),
                    ("apns-request-id", requestID.uuidString.lowercased()), ("content-type", "application/json"),
                ],
                body: payload)
            broadcastsUnansweredSince.withLock { $0 = nil }
            return answer
        } catch {
            broadcastsUnansweredSince.withLock { $0 = $0 ?? .now }
            throw error
        }
    }

    /// How long broadcasts have gone unanswered (no connection, a reset stream, a timeout) since the broadcast
    /// endpoint last answered one; `nil` when it answers, or has not been asked since it last did.
    public var broadcastSilence: Duration? { broadcastsUnansweredSince.withLock { $0 }.map { .now - $0 } }

    /// Forgets the broadcasts that went unanswered: none is owed now.
    public func broadcastsIdle() { broadcastsUnansweredSince.withLock { $0 = nil } }

    /// Closes both connections.
    public func shutdown() async {
        await management.close()
        await broadcasts.close()
    }

    private func send(
        _ endpoint: Endpoint, method: String, path: String, headers: [(String, String)], body: [UInt8] = []
    ) async throws -> Answer {
        var renewed = false
        while true {
            let token = try providerToken.current()
            let connection: APNsConnection
            do {
                connection = try await endpoint.connection()
            } catch {
                throw NoAnswer(
                    description: "no connection to \(endpoint.url): \(type(of: error))", mayHaveArrived: false)
            }
            let response: APNsConnection.Response
            do {
                response = try await connection.send(
                    APNsConnection.Request(
                        path: path, headers: [("authorization", "bearer \(token)")] + headers, body: body,
                        method: method))
            } catch {
                // Its frames may have been written: whether Apple acted on it is unknown.
                throw NoAnswer(description: "no answer from \(endpoint.url): \(type(of: error))", mayHaveArrived: true)
            }
            let reason = Self.reason(in: response.body)
            if response.status == 403, reason == "ExpiredProviderToken", !renewed {
                providerToken.dropExpired(token)
                endpoint.retire(connection)
                renewed = true
                continue
            }
            return Answer(
                status: response.status, reason: reason, requestID: response.requestID,
                channelID: response.channelID, body: response.body, retryAfter: response.retryAfter)
        }
    }

    /// The `reason` of an answer's JSON body, if it has one.
    static func reason(in body: [UInt8]) -> String? {
        guard !body.isEmpty else { return nil }
        return (try? JSONDecoder().decode(ErrorBody.self, from: Data(body)))?.reason
    }

    /// Apple's error body, `{"reason": "…"}` (other members are not read).
    private struct ErrorBody: Decodable {
        var reason: String?
    }

    /// One host's connection.
    private final class Endpoint: Sendable {
        let url: String
        private let host: String
        private let port: Int
        private let tls: NIOSSLContext
        private enum State {
            case empty
            case connecting(EventLoopFuture<APNsConnection>)
            case connected(APNsConnection)
        }
        private let state = Mutex<State>(.empty)

        init(_ url: String, tls: NIOSSLContext) throws {
            guard let parts = URLComponents(string: url), parts.scheme == "https", let host = parts.host,
                !host.isEmpty
            else { throw APNsClientError("an APNs endpoint is https://host[:port]: \(url)") }
            self.url = url
            self.host = host
            port = parts.port ?? 443
            self.tls = tls
        }

        func connection() async throws -> APNsConnection {
            let future = state.withLock { state -> EventLoopFuture<APNsConnection>? in
                switch state {
                case .connected(let connection) where connection.isUsable: return nil
                case .connecting(let future): return future
                case .connected, .empty:
                    let future = APNsConnection.connect(
                        host: host, port: port, tls: tls, on: MultiThreadedEventLoopGroup.singleton.next())
                    state = .connecting(future)
                    return future
                }
            }
            guard let future else {
                if case .connected(let connection) = state.withLock({ $0 }) { return connection }
                return try await self.connection()
            }
            do {
                let connection = try await future.get()
                state.withLock { state in
                    if case .connecting(let pending) = state, pending === future { state = .connected(connection) }
                }
                return connection
            } catch {
                state.withLock { state in
                    if case .connecting(let pending) = state, pending === future { state = .empty }
                }
                throw error
            }
        }

        func retire(_ connection: APNsConnection) {
            state.withLock { state in
                if case .connected(let held) = state, held === connection { state = .empty }
            }
            connection.close()
        }

        func close() async {
            let old = state.withLock { state in
                defer { state = .empty }
                return state
            }
            switch old {
            case .empty: break
            case .connecting(let future): (try? await future.get())?.close()
            case .connected(let connection): connection.close()
            }
        }
    }
}
