import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The device side of the TopicLedger HTTP API (docs/server.md, *Devices*), one call per method. Every call
/// carries the client API key; the registration token is in the path, percent-encoded.
struct ServerAPI: Sendable {
    let configuration: MessagingConfiguration
    let session: URLSession

    /// `POST /v1/projects/{p}/registrations` → a new registration token.
    func register() async throws(MessagingError) -> String {
        struct Body: Encodable {
            let platform: String
            let appId: String?
        }
        struct Reply: Decodable { let token: String }
        let body = Body(platform: configuration.platform.rawValue, appId: configuration.appID)
        let data = try await call("POST", registrations: "", body: try? JSONEncoder().encode(body))
        guard let reply = try? JSONDecoder().decode(Reply.self, from: data), !reply.token.isEmpty else {
            throw .unexpectedResponse(status: 200, "a registration answer without a token")
        }
        return reply.token
    }

    /// Subscribes the device; subscribed already counts as done (409 `ALREADY_EXISTS`).
    func subscribe(_ token: String, to topic: String) async throws(MessagingError) {
        do {
            _ = try await call(
                "POST", registrations: "/\(escaped(token))/topicSubscriptions?topicName=\(Topic.percentEncoded(topic))",
                body: Data("{}".utf8))
        } catch .unexpectedResponse(status: 409, _) {
            return
        }
    }

    /// Unsubscribes the device; not subscribed counts as done (`allowMissing`).
    func unsubscribe(_ token: String, from topic: String) async throws(MessagingError) {
        _ = try await call(
            "DELETE",
            registrations: "/\(escaped(token))/topicSubscriptions/\(Topic.percentEncoded(topic))?allowMissing=true")
    }

    /// `PUT …/registrations/{token}/liveActivities/{topic}`: the device follows the topic's Live Activity with the
    /// activity's push token (hex).
    func followLiveActivity(_ token: String, topic: String, pushToken: String) async throws(MessagingError) {
        _ = try await call(
            "PUT", registrations: "/\(escaped(token))/liveActivities/\(Topic.percentEncoded(topic))",
            body: try? JSONEncoder().encode(ActivityToken(pushToken: pushToken)))
    }

    /// `DELETE …/registrations/{token}/liveActivities/{topic}`; not following counts as done.
    func unfollowLiveActivity(_ token: String, topic: String) async throws(MessagingError) {
        _ = try await call("DELETE", registrations: "/\(escaped(token))/liveActivities/\(Topic.percentEncoded(topic))")
    }

    /// `PUT …/registrations/{token}/pushToStartTokens/{attributesType}`: the device's push-to-start token (hex).
    func setPushToStartToken(
        _ token: String, attributesType: String, pushToken: String
    ) async throws(MessagingError) {
        _ = try await call(
            "PUT", registrations: "/\(escaped(token))/pushToStartTokens/\(escaped(attributesType))",
            body: try? JSONEncoder().encode(ActivityToken(pushToken: pushToken)))
    }

    /// The body of the Live Activity calls.
    private struct ActivityToken: Encodable {
        let pushToken: String
    }

    /// `PUT …/registrations/{token}/apnsToken`: the device's APNs token (hex) and its environment.
    func setAPNSToken(_ token: String, hex: String, sandbox: Bool) async throws(MessagingError) {
        struct Body: Encodable {
            let apnsToken: String
            let apnsSandbox: Bool
        }
        _ = try await call(
            "PUT", registrations: "/\(escaped(token))/apnsToken",
            body: try? JSONEncoder().encode(Body(apnsToken: hex, apnsSandbox: sandbox)))
    }

    /// `DELETE …/registrations/{token}/apnsToken`.
    func clearAPNSToken(_ token: String) async throws(MessagingError) {
        _ = try await call("DELETE", registrations: "/\(escaped(token))/apnsToken")
    }

    /// `DELETE …/registrations/{token}`.
    func unregister(_ token: String) async throws(MessagingError) {
        _ = try await call("DELETE", registrations: "/\(escaped(token))")
    }

    /// A long poll: the messages after `after` (default: the acknowledgement cursor), waiting up to `wait`
    /// seconds for one.
    func poll(_ token: String, after: String?, wait: Int) async throws(MessagingError) -> PollPage {
        var query = "?waitSeconds=\(wait)"
        if let after { query += "&after=\(after)" }
        let data = try await call(
            "GET", registrations: "/\(escaped(token))/messages\(query)", timeout: Double(wait) + 30)
        do {
            return try PollPage(data)
        } catch {
            throw .unexpectedResponse(status: 200, "a long poll answer that is not a page of messages")
        }
    }

    /// Acknowledges every message up to and including `cursor`.
    func acknowledge(_ token: String, through cursor: String) async throws(MessagingError) {
        let body = try? JSONEncoder().encode(["through": cursor])
        _ = try await call("POST", registrations: "/\(escaped(token))/messages:ack", body: body)
    }

    /// `GET …/registrations/{token}/liveActivityChannels/{topic}`: the topic's broadcast channel id, or `nil` when the
    /// topic has none (404 `NOT_FOUND` with errorCode `CHANNEL_NOT_FOUND`; a token the server does not know is 404
    /// `UNREGISTERED`).
    func liveActivityChannel(_ token: String, topic: String) async throws(MessagingError) -> String? {
        struct Reply: Decodable { let channelId: String }
        let (status, data, retryAfter) = try await exchange(
            "GET", registrations: "/\(escaped(token))/liveActivityChannels/\(Topic.percentEncoded(topic))", body: nil,
            timeout: 60)
        // Only the server's own "no channel" (errorCode CHANNEL_NOT_FOUND) is nil, and UNREGISTERED the token: any
        // other 404 (an unknown route, a server without the route) is an error, not "no channel".
        if status == 404 {
            switch MessagingError.errorCode(in: data) {
            case "CHANNEL_NOT_FOUND": return nil
            case "UNREGISTERED": throw .unregistered
            default: throw .unexpectedResponse(status: status, "a 404 that is not the server's answer for no channel")
            }
        }
        guard (200..<300).contains(status) else {
            throw MessagingError.from(status: status, body: data, retryAfterHeader: retryAfter)
        }
        guard let reply = try? JSONDecoder().decode(Reply.self, from: data), !reply.channelId.isEmpty else {
            throw .unexpectedResponse(status: status, "a channel answer without a channelId")
        }
        return reply.channelId
    }

    /// The request of `GET …/messages:stream`, from `lastEventID` when given.
    func streamRequest(_ token: String, lastEventID: String?) -> URLRequest {
        var request = self.request("GET", registrations: "/\(escaped(token))/messages:stream")
        request.setValue("text/event-stream", forHTTPHeaderField: "Accept")
        if let lastEventID { request.setValue(lastEventID, forHTTPHeaderField: "Last-Event-ID") }
        request.timeoutInterval = configuration.streamIdleTimeout
        return request
    }

    // MARK: -

    private func escaped(_ token: String) -> String {
        token.addingPercentEncoding(withAllowedCharacters: Self.unreserved) ?? token
    }

    private static let unreserved = CharacterSet(
        charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~:")

    private func request(_ method: String, registrations path: String) -> URLRequest {
        let project = configuration.projectID.addingPercentEncoding(withAllowedCharacters: Self.unreserved) ?? ""
        let base =
            configuration.serverURL.absoluteString.hasSuffix("/")
            ? String(configuration.serverURL.absoluteString.dropLast()) : configuration.serverURL.absoluteString
        // The path is assembled from escaped pieces; URL(string:) only fails on a server URL that was not one.
        let url = URL(string: "\(base)/v1/projects/\(project)/registrations\(path)") ?? configuration.serverURL
        var request = URLRequest(url: url)
        request.httpMethod = method
        request.setValue(configuration.apiKey, forHTTPHeaderField: "x-goog-api-key")
        return request
    }

    /// One request; the body of a 2xx answer, or the error the answer stands for.
    private func call(
        _ method: String, registrations path: String, body: Data? = nil, timeout: TimeInterval = 60
    ) async throws(MessagingError) -> Data {
        let (status, data, retryAfter) = try await exchange(method, registrations: path, body: body, timeout: timeout)
        guard (200..<300).contains(status) else {
            throw MessagingError.from(status: status, body: data, retryAfterHeader: retryAfter)
        }
        return data
    }

    /// One request: the answer's status, body and `Retry-After`; throws only when no HTTP answer came.
    private func exchange(
        _ method: String, registrations path: String, body: Data?, timeout: TimeInterval
    ) async throws(MessagingError) -> (Int, Data, String?) {
        var request = request(method, registrations: path)
        request.timeoutInterval = timeout
        if let body {
            request.httpBody = body
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let data: Data
        let response: URLResponse
        do {
            (data, response) = try await Self.data(for: request, in: session)
        } catch {
            throw MessagingError.from(transport: error)
        }
        guard let http = response as? HTTPURLResponse else {
            throw .unexpectedResponse(status: 0, "not an HTTP answer")
        }
        return (http.statusCode, data, http.value(forHTTPHeaderField: "Retry-After"))
    }
}

extension ServerAPI {
    /// `URLSession.data(for:)`, made safe to cancel on Linux. FoundationNetworking's version cancels its
    /// `URLSessionTask` inside the Swift task's cancellation handler, which runs with the task's status lock
    /// held and waits for the session's work queue; when the work queue is at that moment resuming the same
    /// task, each waits for the other for good (swift-corelibs-foundation#5412; `Messaging.close()` hung a test
    /// run this way). And `URLSessionTask.cancel()` itself, when the task's answer is already queued, crashes
    /// FoundationNetworking ("Trying to access a behaviour for a task that in not in the registry"): the
    /// stress test in `CancellationTests` met one or the other within 150 cancellations, every run. So here a cancelled call ends at
    /// once with `CancellationError` and, on Linux, its request is left to finish on its own (its answer is
    /// dropped; a long poll ends within its `waitSeconds`); elsewhere the request is cancelled too.
    static func data(for request: URLRequest, in session: URLSession) async throws -> (Data, URLResponse) {
        let call = PendingDataTask()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                call.start(session: session, request: request, continuation: continuation)
            }
        } onCancel: {
            call.cancel()
        }
    }
}

/// One ``ServerAPI/data(for:in:)`` call: its continuation is resumed exactly once — by the answer or by
/// cancellation, whichever comes first (either may come before the request even starts).
private final class PendingDataTask: @unchecked Sendable {
    // @unchecked: every property is only touched with `lock` held.
    private let lock = NSLock()
    private var continuation: CheckedContinuation<(Data, URLResponse), any Error>?
    private var task: URLSessionDataTask?
    private var cancelled = false

    func start(
        session: URLSession, request: URLRequest, continuation: CheckedContinuation<(Data, URLResponse), any Error>
    ) {
        let alreadyCancelled = lock.locked {
            self.continuation = continuation
            return cancelled
        }
        if alreadyCancelled {
            finish(.failure(CancellationError()))
            return
        }
        let task = session.dataTask(with: request) { [self] data, response, error in
            if let error {
                finish(.failure(error))
            } else if let data, let response {
                finish(.success((data, response)))
            } else {
                finish(.failure(URLError(.badServerResponse)))
            }
        }
        // Cancelled while the task was being made: its continuation is resumed already; never start it.
        guard
            lock.locked({ () -> Bool in
                guard !cancelled else { return false }
                self.task = task
                return true
            })
        else { return }
        task.resume()
    }

    func cancel() {
        let task = lock.locked {
            cancelled = true
            return self.task
        }
        finish(.failure(CancellationError()))
        #if !canImport(FoundationNetworking)
            task?.cancel()
        #else
            _ = task
        #endif
    }

    private func finish(_ result: Result<(Data, URLResponse), any Error>) {
        let continuation = lock.locked {
            // The task's completion handler holds this object: let go of the task, so neither keeps the other.
            defer {
                self.continuation = nil
                task = nil
            }
            return self.continuation
        }
        continuation?.resume(with: result)
    }
}

/// A long poll's answer: `{"cursor":"N","messages":[…]}`.
struct PollPage {
    let cursor: String
    let messages: [RemoteMessage]

    init(_ data: Data) throws {
        guard case .object(let object) = try JSONDecoder().decode(PayloadValue.self, from: data),
            case .string(let cursor) = object["cursor"], case .array(let items) = object["messages"]
        else { throw MessagingError.unexpectedResponse(status: 200, "not a page") }
        self.cursor = cursor
        messages = try items.map { try RemoteMessage(delivery: $0) }
    }
}
