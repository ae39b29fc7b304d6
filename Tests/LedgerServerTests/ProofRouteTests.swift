import Foundation
import HTTPTypes
import LedgerCore
import LedgerStore
import LedgerTestSupport
import Testing
import LedgerServer
import LedgerQueries

@Suite("Checkpoints and proofs over HTTP")
struct ProofRouteTests {
    static let project = "/v1/projects/demo-project"

    @Test("a signed checkpoint, a message's proof and a consistency proof, each checkable with the public key")
    func checkpointAndProofs() async throws {
        let server = TestServer()
        let directory = server.configuration.dataDirectory
        try await server.run { client in
            let token = try await client.registerDevice()
            _ = try await client.call(.post, "/iid/v1/\(token)/rel/topics/news")
            let sent = try await client.call(
                .post, "\(Self.project)/messages:send", body: #"{"message":{"topic":"news"}}"#)
            let id = try #require((sent.json["name"] as? String)?.split(separator: "/").last)
            let head = try await client.headSeq()  // waits for the audience

            let checkpoint = try await client.call(
                .get, "\(Self.project)/ledger:checkpoint", headers: TestServer.Client.auditor)
            #expect(checkpoint.status == .ok)
            let key = try CheckpointKeeper.open(dataDirectory: directory, project: .default, create: false).signer
                .verifier
            let signed = try key.verify(note: checkpoint.text)
            #expect(signed.size == head && signed.origin == "topicledger/demo-project")

            let proof = try await client.call(
                .get, "\(Self.project)/messages/\(id):proof", headers: TestServer.Client.admin)
            #expect(proof.status == .ok, "\(proof.text)")
            #expect((proof.json["entries"] as? [[String: Any]])?.map { $0["kind"] as? String } == ["sent", "audience"])
            #expect(try LedgerProofs.verify(Data(proof.text.utf8), key: key).contains("2 events included"))
            // Documents of the wrong shape are refused saying what is wrong with them.
            var entries = try #require(proof.json["entries"] as? [[String: Any]])
            entries[0]["seq"] = -1
            var negative = proof.json
            negative["entries"] = entries
            var noCheckpoint = proof.json
            noCheckpoint["checkpoint"] = nil
            for (document, refusal) in [
                (negative, "an entry is malformed"),
                (noCheckpoint, "a message proof has a checkpoint, a messageId and entries"),
                (["from": 1, "to": 2] as [String: Any], "neither a message proof nor a consistency proof"),
            ] {
                let data = try JSONSerialization.data(withJSONObject: document)
                #expect(throws: ProofRefusal.self) { try LedgerProofs.verify(data, key: key) }
                do {
                    _ = try LedgerProofs.verify(data, key: key)
                } catch {
                    #expect("\(error)".contains(refusal), "\(error)")
                }
            }

            // The log grows; the old checkpoint's tree is a prefix of the new one.
            _ = try await client.call(.post, "/iid/v1/\(token)/rel/topics/sports")
            let consistency = try await client.call(
                .get, "\(Self.project)/ledger:consistency?from=\(head)", headers: TestServer.Client.auditor)
            #expect(consistency.status == .ok, "\(consistency.text)")
            #expect(consistency.json["to"] as? Int == Int(head) + 1)
            #expect(consistency.json["fromRoot"] as? String == Data(signed.root).base64EncodedString())
            #expect(try LedgerProofs.verify(Data(consistency.text.utf8), key: key).contains("prefix"))

            // Bad input, unknown messages, and credentials that may not see proofs.
            for query in ["", "?from=x", "?from=1&to=999", "?from=3&to=2", "?from=-1"] {
                let bad = try await client.call(
                    .get, "\(Self.project)/ledger:consistency\(query)", headers: TestServer.Client.auditor)
                #expect(bad.status == .badRequest && bad.errorCode == "INVALID_ARGUMENT", "\(query)")
            }
            let unknown = try await client.call(
                .get, "\(Self.project)/messages/12345:proof", headers: TestServer.Client.auditor)
            #expect(unknown.status == .notFound)
            let malformed = try await client.call(
                .get, "\(Self.project)/messages/99999999999999999999:proof", headers: TestServer.Client.auditor)
            #expect(malformed.status == .badRequest)
            let device = try await client.call(
                .get, "\(Self.project)/ledger:checkpoint", headers: TestServer.Client.device)
            #expect(device.status == .forbidden)
            let nobody = try await client.call(.get, "\(Self.project)/messages/\(id):proof", headers: [:])
            #expect(nobody.status == .unauthorized)
        }
    }
}

@Suite("A proof's checkpoint covers its message")
struct ProofCoverageTests {
    @Test("a proof asked within a second of the last checkpoint still covers a message sent since")
    func coversNewMessage() async throws {
        let server = TestServer()
        try await server.run { client in
            _ = try await client.registerDevice()
            let first = try await client.call(
                .get, "\(ProofRouteTests.project)/ledger:checkpoint", headers: TestServer.Client.auditor)
            #expect(first.status == .ok)
            let sent = try await client.call(
                .post, "\(ProofRouteTests.project)/messages:send", body: #"{"message":{"topic":"news"}}"#)
            let id = try #require((sent.json["name"] as? String)?.split(separator: "/").last)
            let proof = try await client.call(
                .get, "\(ProofRouteTests.project)/messages/\(id):proof", headers: TestServer.Client.auditor)
            #expect(proof.status == .ok, "\(proof.text)")
            let kinds = (proof.json["entries"] as? [[String: Any]])?.compactMap { $0["kind"] as? String }
            #expect(kinds?.first == "sent", "\(proof.text)")
            let key = try CheckpointKeeper.open(
                dataDirectory: server.configuration.dataDirectory, project: .default, create: false
            ).signer.verifier
            #expect(try LedgerProofs.verify(Data(proof.text.utf8), key: key).contains("included"))
        }
    }
}

@Suite("Checkpoint settings from the config")
struct CheckpointSettingsRouteTests {
    @Test("the server signs with the configured origin, key name and key file")
    func configuredCheckpoint() async throws {
        let keys = TemporaryDirectory()
        defer { keys.remove() }
        let keyFile = keys.path + "/notify.key"
        let settings = try CheckpointSettings(origin: "example.com/notify", keyName: "notify-2026", keyFile: keyFile)
        let server = TestServer { $0.checkpoints[.default] = settings }
        try await server.run { client in
            _ = try await client.registerDevice()
            let checkpoint = try await client.call(
                .get, "\(ProofRouteTests.project)/ledger:checkpoint", headers: TestServer.Client.auditor)
            #expect(checkpoint.status == .ok, "\(checkpoint.text)")
            let key = try CheckpointKeeper.open(
                dataDirectory: server.configuration.dataDirectory, project: .default, settings: settings, create: false
            ).signer.verifier
            #expect(key.name == "notify-2026")
            let signed = try key.verify(note: checkpoint.text)
            let head = try await client.headSeq()
            #expect(signed.origin == "example.com/notify" && signed.size == head)
            let mode = try FileManager.default.attributesOfItem(atPath: keyFile)[.posixPermissions] as? NSNumber
            #expect(mode?.intValue == 0o600)
        }
    }
}
