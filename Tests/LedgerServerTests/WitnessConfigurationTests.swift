import Crypto
import Foundation
import HTTPTypes
import LedgerCore
import LedgerServer
import LedgerTestSupport
import Testing

@Suite("The config file's witnesses")
struct WitnessConfigurationTests {
    let key = "sha256:" + String(repeating: "ab", count: 32)
    static let w1 = try! Cosigner(name: "w1.example", seed: [UInt8](repeating: 1, count: 32)).verifier.vkey
    static let w2 = try! Cosigner(name: "w2.example", seed: [UInt8](repeating: 2, count: 32)).verifier.vkey

    func load(_ members: String) throws -> ServerConfiguration {
        let path = TemporaryDirectory("config").path + "/config.json"
        try Data(#"{"projects": {"shop": {"adminKeys": ["\#(key)"]\#(members)}}}"#.utf8)
            .write(to: URL(fileURLWithPath: path))
        return try ServerConfiguration.load(path: path)
    }

    func witness(_ url: String, _ vkey: String) -> String { #"{"url": "\#(url)", "verifierKey": "\#(vkey)"}"# }

    @Test("witnesses and their quorum are read; the quorum defaults to all of them")
    func reads() throws {
        let two =
            #", "witnesses": [\#(witness("https://w1.example/", Self.w1)), \#(witness("http://w2:7380", Self.w2))]"#
        let configuration = try load(two)
        let requirement = try #require(configuration.witnesses[try ProjectID("shop")])
        #expect(requirement.quorum == 2)
        #expect(requirement.witnesses.map(\.url) == ["https://w1.example", "http://w2:7380"])
        #expect(requirement.witnesses.map(\.key.vkey) == [Self.w1, Self.w2])
        #expect(try load(two + #", "witnessQuorum": 1"#).witnesses[try ProjectID("shop")]?.quorum == 1)
        #expect(try load("").witnesses.isEmpty)
    }

    @Test("a bad witness is refused, naming its field")
    func refusals() {
        let log = try! NoteSigner(name: "log", key: .init()).verifier.keyLine
        for (members, field) in [
            (#", "witnesses": []"#, "projects.shop.witnesses"),
            (#", "witnesses": [\#(witness("ftp://w1", Self.w1))]"#, "witnesses.0.url"),
            (#", "witnesses": [\#(witness("https://w1?x=1", Self.w1))]"#, "witnesses.0.url"),
            (#", "witnesses": [\#(witness("https://w1", log))]"#, "witnesses.0.verifierKey"),
            (#", "witnesses": [\#(witness("https://w1", Self.w1)), \#(witness("https://w2", Self.w1))]"#, "witnesses"),
            (#", "witnesses": [\#(witness("https://w1", Self.w1))], "witnessQuorum": 2"#, "witnessQuorum"),
            (#", "witnesses": [\#(witness("https://w1", Self.w1))], "witnessQuorum": 0"#, "witnessQuorum"),
            (#", "witnesses": [\#(witness("https://w1", Self.w1))], "witnessQuorum": "1""#, "witnessQuorum"),
            (#", "witnessQuorum": 1"#, "witnessQuorum"),
            (#", "witnesses": [{"url": "https://w1"}]"#, "witnesses.0"),
            (#", "witnesses": "https://w1""#, "witnesses"),
        ] {
            #expect(throws: LedgerCoreError.self, "\(members)") { try load(members) }
            do {
                _ = try load(members)
            } catch {
                #expect("\(error)".contains(field), "\(members): \(error)")
            }
        }
    }
}

@Suite("Witnesses through the server")
struct WitnessServerTests {
    @Test("a damaged cosigned.jsonl answers checkpoints with 503, and nothing else of the project stops")
    func damagedCosignedFile() async throws {
        let witness = try Cosigner(name: "w1.example", seed: [UInt8](repeating: 1, count: 32)).verifier
        let requirement = try WitnessRequirement(witnesses: [.init(url: "http://127.0.0.1:9", key: witness)])
        let server = TestServer { $0.witnesses[.default] = requirement }
        let directory = server.configuration.dataDirectory + "/demo-project"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try Data("not a kept checkpoint\n".utf8).write(to: URL(fileURLWithPath: directory + "/cosigned.jsonl"))
        try await server.run { client in
            _ = try await client.registerDevice()
            let checkpoint = try await client.call(
                .get, "\(ProofRouteTests.project)/ledger:checkpoint", headers: TestServer.Client.auditor)
            #expect(checkpoint.status == .serviceUnavailable, "\(checkpoint.text)")
            #expect(checkpoint.text.contains("cosigned checkpoints cannot be read"))
            #expect(!checkpoint.text.contains(directory))  // no file paths for clients
            let sent = try await client.call(
                .post, "\(ProofRouteTests.project)/messages:send", body: #"{"message":{"topic":"news"}}"#)
            #expect(sent.status == .ok)
        }
    }
}
