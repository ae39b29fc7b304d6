import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import LedgerCore
import LedgerStore
import LedgerTestSupport
import Testing

@testable import LedgerServer

/// Registration expiry and a device's open connections (issue #65): a stream held open across sweeps is activity
/// and keeps its device, and expiring a device ends its open stream at once (as an erasure or an unregistration
/// does), not at its next keep-alive 15 s later. The sweeper's steps are called directly, so that a sweep comes
/// exactly when the test says.
@Suite("Expiry and open connections", .offThePool)
struct ExpiryAndOpenConnectionsTests {
    private static let device: HTTPFields = [HTTPField.Name("x-goog-api-key")!: "dev-client-key"]

    /// A live server on a fresh ledger, its registry, and a sweeper over the same registry.
    private func withServer(
        _ body:
            @escaping @Sendable (
                _ port: Int, _ register: @Sendable () async throws -> String,
                _ ledgers: LedgerRegistry, _ sweeper: RegistrationExpirySweeper
            ) async throws -> Void
    ) async throws {
        let directory = TemporaryDirectory("ledger-expiry-connections")
        defer { directory.remove() }
        var configuration = ServerConfiguration.development
        configuration.dataDirectory = directory.path
        configuration.port = 0
        let ledgers = try LedgerRegistry(configuration: configuration, logger: quietLogger)
        defer { ledgers.closeAll() }
        let sweeper = RegistrationExpirySweeper(configuration: configuration, ledgers: ledgers, logger: quietLogger)
        let app = buildApplication(configuration: configuration, ledgers: ledgers, logger: quietLogger)
        try await app.test(.live) { client in
            let port = try #require(client.port)
            let register: @Sendable () async throws -> String = {
                let reply = try await client.execute(
                    uri: "/v1/projects/demo-project/registrations", method: .post, headers: Self.device,
                    body: ByteBuffer(string: #"{"platform":"android"}"#))
                let object = try JSONSerialization.jsonObject(with: Data(reply.body.readableBytesView))
                return try #require((object as? [String: Any])?["token"] as? String)
            }
            try await body(port, register, ledgers, sweeper)
        }
    }

    private static func stream(_ token: String, port: Int) throws -> SSEReader {
        try SSEReader(
            port: port, path: "/v1/projects/demo-project/registrations/\(token)/messages:stream",
            headers: ["x-goog-api-key": "dev-client-key"])
    }

    private static func isRegistered(_ token: String, _ ledgers: LedgerRegistry) async throws -> Bool {
        let ledger = try await ledgers.ledger(for: .default)
        return try ledger.read { snapshot in
            guard let instance = try snapshot.instanceID(of: try RegistrationToken(token)) else { return false }
            return try snapshot.isRegistered(instance)
        }
    }

    @Test("a device whose stream stays open across sweeps is not expired; a silent one beside it is")
    func openStreamIsActivity() async throws {
        try await withServer { port, register, ledgers, sweeper in
            let (streaming, silent) = (try await register(), try await register())
            let stream = try Self.stream(streaming, port: port)
            #expect(await stream.responseStatus(timeout: 10) == 200)
            // Both were last heard from at their registration, over a second ago; a sweep with an expiry of one
            // second takes the silent one and leaves the one whose stream is open, sweep after sweep.
            let expiry = RegistrationExpiry(seconds: 1)
            for _ in 0..<2 {
                try await Task.sleep(for: .milliseconds(2_100))
                #expect(await sweeper.sweep(.default, expiry: expiry) == .completed)
                #expect(try await Self.isRegistered(streaming, ledgers))
            }
            #expect(try await Self.isRegistered(silent, ledgers) == false)
            #expect(await stream.end(timeout: 0.5) == false, "the stream of the device kept stays open")
        }
    }

    @Test("expiring devices ends their open stream and long poll at once, not at the next keep-alive or deadline")
    func expiryEndsTheStreamAndThePoll() async throws {
        try await withServer { port, register, ledgers, sweeper in
            let (streaming, polling) = (try await register(), try await register())
            let stream = try Self.stream(streaming, port: port)
            #expect(await stream.responseStatus(timeout: 10) == 200)
            let poll = try SSEReader(
                port: port, path: "/v1/projects/demo-project/registrations/\(polling)/messages?waitSeconds=60",
                headers: ["x-goog-api-key": "dev-client-key"])
            #expect(await poll.responseStatus(timeout: 1) == 0, "the poll waits")
            // What a sweep does to devices it read as silent just before their connections opened.
            let ledger = try await ledgers.ledger(for: .default)
            let devices = try [streaming, polling].map { text in
                let token = try RegistrationToken(text)
                let device = try #require(try ledger.read { try $0.instanceID(of: token) })
                return (token: token, device: device, lastActive: Int64(1))
            }
            let started = ContinuousClock.now
            let expired = try await sweeper.expire(
                devices, of: .default, in: ledger, expiry: RegistrationExpiry(seconds: 1))
            #expect(expired == 2)
            #expect(await stream.end(timeout: 5), "the stream ended")
            #expect(await poll.responseStatus(timeout: 5) == 404, "the poll answered UNREGISTERED")
            #expect(ContinuousClock.now - started < .seconds(5))
            #expect(try await Self.isRegistered(streaming, ledgers) == false)
        }
    }
}
