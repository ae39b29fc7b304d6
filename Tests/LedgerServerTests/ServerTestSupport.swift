import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import LedgerCore
import LedgerServer
import LedgerStore
import LedgerTestSupport
import Logging
import Testing

/// A server on a fresh data directory, driven through Hummingbird's router test client.
struct TestServer {
    let directory = TemporaryDirectory("ledger-server")
    var configuration: ServerConfiguration
    /// The server's logger (quiet unless a test reads the lines).
    var logger: Logger?

    init(configure: (inout ServerConfiguration) -> Void = { _ in }) {
        configuration = .development
        configuration.dataDirectory = directory.path
        configure(&configuration)
    }

    /// Runs `body` with a client; returns after the ledgers are closed.
    func run(_ body: @escaping @Sendable (Client) async throws -> Void) async throws {
        defer { directory.remove() }
        let ledgers = try LedgerRegistry(configuration: configuration, logger: logger ?? quietLogger)
        defer { ledgers.closeAll() }
        let app = Application(
            router: buildRouter(configuration: configuration, ledgers: ledgers),
            services: [DeliverySweeper(ledgers: ledgers)])
        try await app.test(.router) { client in try await body(Client(client: client, ledgers: ledgers)) }
    }

    struct Client {
        let client: any TestClientProtocol
        let ledgers: LedgerRegistry

        static let admin: HTTPFields = [.authorization: "Bearer owner", .contentType: "application/json"]
        static let auditor: HTTPFields = [.authorization: "Bearer auditor"]
        static let device: HTTPFields = [HTTPField.Name("x-goog-api-key")!: "dev-client-key"]

        /// Sends a request; the body is JSON text.
        func call(_ method: HTTPRequest.Method, _ uri: String, headers: HTTPFields = admin, body: String? = nil)
            async throws -> Reply
        {
            let response = try await client.executeRequest(
                uri: uri, method: method, headers: headers, body: body.map { ByteBuffer(string: $0) })
            let data = Data(response.body.readableBytesView)
            return Reply(
                status: response.status, headers: response.headers,
                json: (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] ?? [:],
                text: String(decoding: data, as: UTF8.self))
        }

        /// Registers a device with the client key and returns its token.
        func registerDevice(platform: String = "ios") async throws -> String {
            let reply = try await call(
                .post, "/v1/projects/demo-project/registrations", headers: Self.device,
                body: #"{"platform":"\#(platform)","appId":"com.example.app"}"#)
            #expect(reply.status == .ok)
            return try #require(reply.json["token"] as? String)
        }

        /// The head seq of the demo project's ledger (to check that rejected requests append nothing), once
        /// the audiences of earlier sends are recorded.
        func headSeq() async throws -> UInt64 {
            let ledger = try await ledgers.ledger(for: .default)
            ledger.waitForAudiences()
            return try ledger.readLog { try $0.head().seq }
        }

        /// Every event of the demo project's ledger, once the audiences of earlier sends are recorded.
        func events() async throws -> [LedgerEvent] {
            var events: [LedgerEvent] = []
            let ledger = try await ledgers.ledger(for: .default)
            ledger.waitForAudiences()
            try ledger.readLog { snapshot in
                try snapshot.forEachEvent { event, _ in
                    events.append(event)
                    return true
                }
            }
            return events
        }

        /// The last `sent` event.
        func lastSent() async throws -> (event: LedgerEvent, sent: SentMessage)? {
            for event in try await events().reversed() {
                if case .sent(let sent) = event.body { return (event, sent) }
            }
            return nil
        }
    }

    struct Reply {
        let status: HTTPResponse.Status
        let headers: HTTPFields
        let json: [String: Any]
        let text: String

        var error: [String: Any] { json["error"] as? [String: Any] ?? [:] }
        var googleStatus: String? { error["status"] as? String }
        /// The FcmError errorCode in details (what the SDKs report as the reason).
        var errorCode: String? {
            (error["details"] as? [[String: Any]])?.first { ($0["@type"] as? String)?.hasSuffix("FcmError") == true }?[
                "errorCode"] as? String
        }
        var fieldViolations: [[String: String]] {
            ((error["details"] as? [[String: Any]])?.first {
                ($0["@type"] as? String)?.hasSuffix("BadRequest") == true
            }?[
                "fieldViolations"] as? [[String: String]]) ?? []
        }
    }
}
