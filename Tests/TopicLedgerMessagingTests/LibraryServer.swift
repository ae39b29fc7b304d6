import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import LedgerServer
import LedgerTestSupport
import NIOCore
import Testing
import TopicLedgerMessaging

/// The real server, in process on a free port, behind a front that can answer chosen requests itself — an error
/// status, a stream cut after some bytes — and records every request it sees.
struct LibraryServer {
    let directory = TemporaryDirectory("messaging-library")
    var configuration: ServerConfiguration
    let front = Front()

    init(configure: (inout ServerConfiguration) -> Void = { _ in }) {
        configuration = .development
        configuration.dataDirectory = directory.path
        configuration.port = 0
        configure(&configuration)
    }

    /// The library's configuration for this server, its store in the test's directory.
    func messagingConfiguration(
        store: String = "device.json", key: String = "dev-client-key", platform: MessagingConfiguration.Platform = .ios,
        autoInit: Bool = true, port: Int
    ) -> MessagingConfiguration {
        MessagingConfiguration(
            serverURL: URL(string: "http://127.0.0.1:\(port)")!, projectID: "demo-project", apiKey: key,
            platform: platform, appID: "com.example.app",
            storeURL: URL(fileURLWithPath: directory.path).appendingPathComponent(store),
            isAutoInitEnabled: autoInit, retry: RetryPolicy(initialDelay: 0.05, maximumDelay: 0.5),
            pollWaitSeconds: 2, callbackQueue: DispatchQueue(label: "callbacks"))
    }

    /// Runs `body` with the port and an admin client; returns after the ledgers are closed.
    func run(_ body: @escaping @Sendable (Admin) async throws -> Void) async throws {
        defer { directory.remove() }
        let ledgers = try LedgerRegistry(configuration: configuration, logger: quietLogger)
        defer { ledgers.closeAll() }
        let router = buildRouter(configuration: configuration, ledgers: ledgers, logger: quietLogger)
        let app = Application(
            responder: FrontResponder(inner: router.buildResponder(), front: front),
            configuration: .init(address: .hostname("127.0.0.1", port: 0)), logger: quietLogger)
        try await app.test(.live) { client in
            try await body(Admin(client: client, port: try #require(client.port)))
        }
    }

    /// The backend's side, with the admin key (and the client key where a device's view is wanted).
    struct Admin: Sendable {
        let client: any TestClientProtocol
        let port: Int

        func call(
            _ method: HTTPRequest.Method, _ uri: String, key: String? = nil, body: String? = nil
        ) async throws -> (status: HTTPResponse.Status, json: [String: Any]) {
            var headers: HTTPFields = [.contentType: "application/json"]
            if let key {
                headers[HTTPField.Name("x-goog-api-key")!] = key
            } else {
                headers[.authorization] = "Bearer owner"
            }
            let response = try await client.executeRequest(
                uri: uri, method: method, headers: headers, body: body.map { ByteBuffer(string: $0) })
            let json =
                (try? JSONSerialization.jsonObject(with: Data(response.body.readableBytesView))) as? [String: Any]
            return (response.status, json ?? [:])
        }

        /// Sends `message` (the inside of `{"message":…}`); returns its message id.
        func send(_ message: String) async throws -> String {
            let reply = try await call(
                .post, "/v1/projects/demo-project/messages:send", body: #"{"message":\#(message)}"#)
            let name = try #require(reply.json["name"] as? String, "send answered \(reply.status)")
            return String(name.split(separator: "/").last!)
        }

        /// The topics the server has for `token`, sorted; nil when it does not know the token.
        func topics(of token: String) async throws -> [String]? {
            let reply = try await call(.get, "/v1/projects/demo-project/registrations/\(token)/topicSubscriptions")
            guard reply.status == .ok else { return nil }
            let list = reply.json["topicSubscriptions"] as? [[String: Any]] ?? []
            return list.compactMap { ($0["name"] as? String)?.split(separator: "/").last.map(String.init) }.sorted()
        }

        /// The message ids a long poll of the device returns now (from its acknowledgement cursor).
        func undelivered(_ token: String) async throws -> [String] {
            let reply = try await call(
                .get, "/v1/projects/demo-project/registrations/\(token)/messages?waitSeconds=0", key: "dev-client-key")
            return (reply.json["messages"] as? [[String: Any]] ?? []).compactMap { $0["messageId"] as? String }
        }
    }
}

/// What the front does with the requests it is told about; the rest go to the server.
final class Front: @unchecked Sendable {
    // @unchecked: `rules` and `seen` are only touched with `lock` held.
    enum Answer: Sendable {
        /// Answer with this status, a Google error body (or `body`), and `Retry-After` when given.
        case status(Int, retryAfter: Int? = nil, body: String? = nil, contentType: String = "application/json")
        /// Pass to the server, and end the connection after this many bytes of the answer's body.
        case cutAfter(bytes: Int)
    }
    struct Rule {
        let method: HTTPRequest.Method
        let pathContains: String
        var remaining: Int
        let answer: Answer
    }
    struct Seen: Sendable {
        let method: HTTPRequest.Method
        let path: String
        let headers: HTTPFields
        let time: ContinuousClock.Instant
    }

    private let lock = NSLock()
    private var rules: [Rule] = []
    private var seen: [Seen] = []

    /// The next `times` requests with `method` whose path contains `path` get `answer` (rules apply in order).
    func on(_ method: HTTPRequest.Method, _ path: String, times: Int = 1, _ answer: Answer) {
        lock.lock()
        rules.append(Rule(method: method, pathContains: path, remaining: times, answer: answer))
        lock.unlock()
    }

    func clearRules() {
        lock.lock()
        rules.removeAll()
        lock.unlock()
    }

    func requests(_ method: HTTPRequest.Method, _ path: String) -> [Seen] {
        lock.lock()
        defer { lock.unlock() }
        return seen.filter { $0.method == method && $0.path.contains(path) }
    }

    fileprivate func take(_ request: Request) -> Answer? {
        lock.lock()
        defer { lock.unlock() }
        let path = request.uri.path
        seen.append(Seen(method: request.method, path: path, headers: request.headers, time: .now))
        guard let index = rules.firstIndex(where: { $0.method == request.method && path.contains($0.pathContains) })
        else { return nil }
        rules[index].remaining -= 1
        let answer = rules[index].answer
        if rules[index].remaining == 0 { rules.remove(at: index) }
        return answer
    }
}

struct FrontResponder<Inner: HTTPResponder>: HTTPResponder where Inner.Context == LedgerRequestContext {
    let inner: Inner
    let front: Front

    func respond(to request: Request, context: LedgerRequestContext) async throws -> Response {
        switch front.take(request) {
        case nil:
            return try await inner.respond(to: request, context: context)
        case .status(let code, let retryAfter, let body, let contentType)?:
            var headers: HTTPFields = [.contentType: contentType]
            if let retryAfter { headers[.retryAfter] = String(retryAfter) }
            let text =
                body ?? #"{"error":{"code":\#(code),"message":"from the test's front","status":"UNAVAILABLE"}}"#
            return Response(
                status: HTTPResponse.Status(code: code), headers: headers,
                body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
        case .cutAfter(let bytes)?:
            var response = try await inner.respond(to: request, context: context)
            let body = response.body
            response.body = ResponseBody { writer in
                try await body.write(CuttingWriter(inner: writer, remaining: bytes))
            }
            return response
        }
    }
}

/// Passes `remaining` bytes on, then fails: the server drops the connection mid-body.
struct CuttingWriter: ResponseBodyWriter {
    var inner: any ResponseBodyWriter
    var remaining: Int
    struct Cut: Error {}

    mutating func write(_ buffer: ByteBuffer) async throws {
        guard buffer.readableBytes > remaining else {
            remaining -= buffer.readableBytes
            return try await inner.write(buffer)
        }
        if remaining > 0 { try await inner.write(buffer.getSlice(at: buffer.readerIndex, length: remaining)!) }
        remaining = 0
        throw Cut()
    }

    consuming func finish(_ trailingHeaders: HTTPFields?) async throws {
        try await inner.finish(trailingHeaders)
    }
}

/// Waits until `condition` holds, up to `seconds`; returns whether it did.
func eventually(within seconds: Double = 10, _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return try await condition()
}
