import Foundation
import LedgerTestSupport
import Testing
import HTTPTypes

/// `ledger-device` (samples/DeviceClient), the library's command-line device, run as a process.
@Suite("ledger-device", .timeLimit(.minutes(2)))
struct DeviceCommandTests {
    /// Runs the device (on a thread of its own: ``runProduct(_:_:input:)``).
    static func device(_ arguments: [String], port: Int, store: String) async throws -> ProcessResult {
        try await runProduct("ledger-device", arguments + ["--server", "http://127.0.0.1:\(port)", "--store", store])
    }

    @Test("every subcommand has --help, and bad options exit 64 with the usage")
    func help() async throws {
        let top = try await runProduct("ledger-device", ["--help"])
        #expect(top.status == 0 && top.stdout.contains("Exit status"))
        for command in ["register", "subscribe", "unsubscribe", "poll", "stream", "unregister"] {
            let help = try await runProduct("ledger-device", [command, "--help"])
            #expect(help.status == 0, "\(command) --help")
            #expect(help.stdout.contains("--store"), "\(command) --help: \(help.stdout)")
        }
        let usage = try await runProduct("ledger-device", ["poll", "--wait", "61"])
        #expect(usage.status == 64 && usage.stderr.contains("--wait must be 0 to 60"))
        let server = try await runProduct("ledger-device", ["register", "--server", "ftp://x"])
        #expect(server.status == 64 && server.stderr.contains("--server must be an http or https URL"))
    }

    @Test("exit statuses say what went wrong; a subscribe the server could not take is sent by the next run")
    func exitStatuses() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            let store = server.directory.path + "/cli.json"
            let register = try await Self.device(["register"], port: admin.port, store: store)
            #expect(register.status == 0)
            let token = register.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(try await admin.topics(of: token) == [])
            // Registering again is the same device.
            #expect(try await Self.device(["register"], port: admin.port, store: store).stdout == register.stdout)

            let bad = try await Self.device(["subscribe", "no spaces"], port: admin.port, store: store)
            #expect(bad.status == 65 && bad.stderr.contains("invalid topic name"))
            let wrongKey = try await Self.device(
                ["subscribe", "news", "--key", "nope"], port: admin.port, store: server.directory.path + "/other.json")
            #expect(wrongKey.status == 77, "\(wrongKey.stderr)")

            server.front.on(.post, "/topicSubscriptions", times: 1000, .status(503))
            let away = try await Self.device(["subscribe", "news", "--timeout", "1"], port: admin.port, store: store)
            #expect(away.status == 69 && away.stderr.contains("still pending"))
            #expect(try await admin.topics(of: token) == [])
            server.front.clearRules()
            let next = try await Self.device(["subscribe", "/topics/sports"], port: admin.port, store: store)
            #expect(next.status == 0)
            #expect(try await admin.topics(of: token) == ["news", "sports"])

            #expect(try await Self.device(["unsubscribe", "news"], port: admin.port, store: store).status == 0)
            #expect(try await admin.topics(of: token) == ["sports"])
            let id = try await admin.send(#"{"topic":"sports","data":{"score":"2-1"}}"#)
            let poll = try await Self.device(["poll", "--ack"], port: admin.port, store: store)
            #expect(poll.status == 0 && poll.stdout.contains(#""messageId":"\#(id)""#))
            #expect(try await admin.undelivered(token) == [])

            #expect(try await Self.device(["unregister"], port: admin.port, store: store).status == 0)
            #expect(try await admin.topics(of: token) == nil)
        }
    }
}
