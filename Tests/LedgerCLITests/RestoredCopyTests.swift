import Foundation
import LedgerCore
import LedgerTestSupport
import Testing

/// A ledger restored from a backup older than an erasure, with the current `erasures.jsonl` beside it
/// (docs/operations.md, "Erasures and restores"): no command that reads it shows the erased token or its APNs
/// token — each applies the journal's erasures first, or refuses naming `erasures.jsonl` while another process
/// holds the writer lock.
@Suite("ledger CLI on a restored copy", .offThePool)
struct LedgerCLIRestoreTests {
    private static let erased = "cRESTOREDERASED:APA91b-0123456789abcdefghijklmnopqrstuvwxyz"
    private static let kept = "cRESTOREDKEPT:APA91b-0123456789abcdefghijklmnopqrstuvwxyz"
    private static let apnsToken = String(repeating: "d7", count: 16) + String(repeating: "3a", count: 16)

    /// Every command that reads the ledger, with arguments that make it print what it can of the devices.
    private static func readingCommands(message: String, backup: String) -> [[String]] {
        [
            ["log"], ["log", "--format", "text"], ["replay", "--message", message],
            ["replay", "--message", message, "--format", "json"], ["replay", "--message", message, "--naive"],
            ["audit", "instance", kept], ["audit", "topic", "news", "--members"],
            ["audit", "topic", "news", "--members", "--format", "json"], ["audit", "erasures", "--format", "json"],
            ["verify", "--audiences"], ["stats"], ["topics"], ["explain", "--condition", "'news' in topics"],
            ["checkpoint"], ["prove", "--message", message], ["backup", backup],
        ]
    }

    /// The output of `result` and the files under `backup`, if any hold a form of either identifier.
    private static func shown(_ result: ProcessResult, backup: String) -> [String] {
        let output = Data((result.stdout + result.stderr).utf8)
        var found: [String] = []
        for identifier in [Array(erased.utf8), Array(Data(hex: apnsToken))] {
            for form in IdentifierSearch.forms(of: identifier) where output.range(of: Data(form)) != nil {
                found.append("output: \(String(decoding: form.prefix(12), as: UTF8.self))")
            }
            found += IdentifierSearch.files(under: backup, holding: identifier)
        }
        return found
    }

    private static func jsonObject(_ text: some StringProtocol) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] ?? [:]
    }

    @Test("every reading command applies the journal's erasures first, or refuses naming erasures.jsonl")
    func readingARestoredCopy() async throws {
        let data = TemporaryDirectory()
        defer { data.remove() }
        let backups = TemporaryDirectory()
        defer { backups.remove() }
        let input = """
            {"op":"register","token":"\(Self.erased)","platform":"ios","time":1}
            {"op":"setApnsToken","token":"\(Self.erased)","apnsToken":"\(Self.apnsToken)","time":1}
            {"op":"register","token":"\(Self.kept)","platform":"android","time":1}
            {"op":"subscribe","token":"\(Self.erased)","topic":"news","via":"iid","time":2}
            {"op":"subscribe","token":"\(Self.kept)","topic":"news","via":"iid","time":2}
            {"op":"send","topic":"news","message":{"data":{"k":"v"}},"time":3}

            """
        let imported = try await runProduct("ledger", ["import", "-", "--data", data.path], input: input)
        #expect(imported.status == 0, "\(imported.stderr)")
        let message = try #require(
            try await runProduct("ledger", ["log", "--data", data.path]).stdout.split(separator: "\n").lazy
                .map { Self.jsonObject($0) }.first { $0["kind"] as? String == "sent" }?["messageId"] as? String)
        let backup = try await runProduct("ledger", ["backup", backups.path, "--data", data.path])
        #expect(backup.status == 0, "\(backup.stderr)")
        let erase = try await runProduct(
            "ledger", ["erase", "--token", Self.erased, "--reason", "GDPR Art. 17", "--data", data.path])
        #expect(erase.status == 0, "\(erase.stderr)")

        // The operator restores the older copy: its data file in place, erasures.jsonl left beside it.
        let ledgerDirectory = data.path + "/" + ProjectID.default.rawValue
        #expect(FileManager.default.fileExists(atPath: ledgerDirectory + "/erasures.jsonl"))
        for file in ["data.mdb", "lock.mdb"] {
            try? FileManager.default.removeItem(atPath: ledgerDirectory + "/" + file)
        }
        try FileManager.default.copyItem(
            atPath: backups.path + "/" + ProjectID.default.rawValue + "/data.mdb", toPath: ledgerDirectory + "/data.mdb"
        )
        #expect(IdentifierSearch.files(under: data.path, holding: Array(Self.erased.utf8)) != [])

        // While another process holds the writer lock, every reading command refuses, naming the journal.
        let lock = open(ledgerDirectory + "/writer.lock", O_RDWR | O_CREAT, 0o600)
        #expect(lock >= 0 && flock(lock, LOCK_EX | LOCK_NB) == 0)
        for (index, command) in Self.readingCommands(message: message, backup: "").enumerated() {
            let copy = backups.path + "/locked-\(index)"
            let arguments = command.first == "backup" ? ["backup", copy] : command
            let result = try await runProduct("ledger", arguments + ["--data", data.path])
            #expect(result.status != 0 && result.stderr.contains("erasures.jsonl"), "\(command): \(result.stdout)")
            #expect(Self.shown(result, backup: copy) == [], "\(command)")
        }
        close(lock)

        // Then the first of them applies the erasures, and none shows the device.
        for (index, command) in Self.readingCommands(message: message, backup: "").enumerated() {
            let copy = backups.path + "/copy-\(index)"
            let arguments = command.first == "backup" ? ["backup", copy] : command
            let result = try await runProduct("ledger", arguments + ["--data", data.path])
            #expect(result.status == 0, "\(command): \(result.stderr)")
            #expect(Self.shown(result, backup: copy) == [], "\(command)")
        }
        #expect(IdentifierSearch.files(under: data.path, holding: Array(Self.erased.utf8)) == [])
        #expect(IdentifierSearch.files(under: data.path, holding: Array(Data(hex: Self.apnsToken))) == [])
        let erasures = try await runProduct("ledger", ["audit", "erasures", "--format", "json", "--data", data.path])
        let listed = (Self.jsonObject(erasures.stdout)["erasures"] as? [[String: Any]])?.map { $0["actor"] as? String }
        #expect(listed == ["restore"])
    }
}

extension Data {
    /// The bytes of an even-length lowercase hex string (test input only).
    fileprivate init(hex: String) {
        let digits = Array(hex.utf8)
        self.init(
            stride(from: 0, to: digits.count, by: 2).map {
                UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16)!
            })
    }
}
