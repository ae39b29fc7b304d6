import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import LedgerServer
import LedgerTestSupport
import Testing
import LedgerStore
import LedgerCore
import LedgerQueries

@Suite("Live server")
struct LiveSmokeTests {
    @Test("over a real socket: register, subscribe, send, and the ledger verifies")
    func smoke() async throws {
        let directory = TemporaryDirectory("ledger-live")
        defer { directory.remove() }
        var configuration = ServerConfiguration.development
        configuration.dataDirectory = directory.path
        configuration.port = 0
        let ledgers = try LedgerRegistry(configuration: configuration, logger: quietLogger)
        let app = buildApplication(configuration: configuration, ledgers: ledgers, logger: quietLogger)
        try await app.test(.live) { client in
            let registered = try await client.execute(
                uri: "/v1/projects/demo-project/registrations", method: .post,
                headers: [HTTPField.Name("x-goog-api-key")!: "dev-client-key"], body: ByteBuffer(string: "{}"))
            #expect(registered.status == .ok)
            let token = try #require(
                (try JSONSerialization.jsonObject(with: Data(registered.body.readableBytesView)) as? [String: Any])?[
                    "token"]
                    as? String)
            let admin: HTTPFields = [.authorization: "Bearer owner"]
            let subscribed = try await client.execute(
                uri: "/iid/v1:batchAdd", method: .post, headers: admin,
                body: ByteBuffer(string: #"{"to":"/topics/news","registration_tokens":["\#(token)"]}"#))
            #expect(String(buffer: subscribed.body) == #"{"results":[{}]}"#)
            let sent = try await client.execute(
                uri: "/v1/projects/demo-project/messages:send", method: .post, headers: admin,
                body: ByteBuffer(string: #"{"message":{"condition":"'news' in topics"}}"#))
            #expect(sent.status == .ok)
        }
        let ledger = try await ledgers.ledger(for: .default)
        ledger.waitForAudiences()
        // registered, subscribed, sent, and the send's audience: the one instance on 'news'.
        let audience = try ledger.readLog { try $0.event(at: 4) }
        guard case .audience(let record) = audience?.body else {
            Issue.record("expected the audience at seq 4")
            return
        }
        #expect(record.sendSeq == 3 && record.recipientCount == 1)
        #expect(try ledger.readLog { try $0.head().seq } == 4)
        #expect(try ledger.verify().isSound)
        ledgers.closeAll()
    }
}
