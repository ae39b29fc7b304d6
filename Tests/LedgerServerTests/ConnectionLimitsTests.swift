import Foundation
import LedgerCore
import LedgerTestSupport
import Testing

@testable import LedgerServer

/// The connection limits `ledger serve` reads from its config file and `ledger witness` from its flags: one
/// type, one range check (`IntegrationTests/witness/test_witness_limits.py` tests them through the binary).
@Suite("Connection limits")
struct ConnectionLimitsTests {
    private func load(limits: String) throws -> ServerConfiguration {
        let path = TemporaryDirectory("connection-limits").path + "/config.json"
        let key = "sha256:" + String(repeating: "ab", count: 32)
        try Data(#"{"projects": {"p": {"adminKeys": ["\#(key)"]}}, "limits": \#(limits)}"#.utf8)
            .write(to: URL(fileURLWithPath: path))
        return try ServerConfiguration.load(path: path)
    }

    @Test("the config file sets each connection limit by the key the witness's flag is named after")
    func configKeys() throws {
        let configuration = try load(
            limits: #"""
                {"idleTimeoutSeconds": 5, "requestBodyTimeoutSeconds": 7, "minRequestBodyBytesPerSecond": 9,
                 "maxConnections": 11, "maxConnectionsPerAddress": 3}
                """#)
        #expect(
            configuration.connections
                == ConnectionLimits(
                    idleTimeoutSeconds: 5, requestBodyTimeoutSeconds: 7, minimumBodyBytesPerSecond: 9,
                    maximumConnections: 11, maximumConnectionsPerAddress: 3))
        #expect(try load(limits: "{}").connections == .server)
    }

    @Test("each limit is at least 1 and a timeout at most a day, in the file as in the flags")
    func ranges() throws {
        for (key, value, problem) in [
            ("maxConnectionsPerAddress", 0, "at least 1"), ("maxConnections", -1, "at least 1"),
            ("idleTimeoutSeconds", 86_401, "at most 86400"), ("requestBodyTimeoutSeconds", 86_401, "at most 86400"),
        ] {
            #expect(ConnectionLimits.problem(key: key, value: value)?.contains(problem) == true)
            let error = #expect(throws: LedgerCoreError.self) { try load(limits: #"{"\#(key)": \#(value)}"#) }
            #expect(error?.message.contains(problem) == true, "\(key)")
        }
        #expect(ConnectionLimits.problem(key: "idleTimeoutSeconds", value: 86_400) == nil)
        #expect(ConnectionLimits.problem(key: "maxConnections", value: 1_000_000) == nil)
    }

    @Test("defaults: the server's allow long polls and shared addresses; a public witness's are tighter")
    func defaults() {
        #expect(ServerConfiguration.development.connections == .server)
        let server = ConnectionLimits.server
        #expect(server.idleTimeoutSeconds == 30 && server.requestBodyTimeoutSeconds == 60)
        #expect(server.maximumConnections == 10_000 && server.maximumConnectionsPerAddress == 1_000)
        let witness = ConnectionLimits.witness
        #expect(witness.idleTimeoutSeconds == 10 && witness.requestBodyTimeoutSeconds == 10)
        #expect(witness.maximumConnections == 1_024 && witness.maximumConnectionsPerAddress == 16)
    }
}
