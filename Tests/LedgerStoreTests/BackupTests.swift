import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import Testing
import LedgerQueries

/// `Ledger.backup(to:)` writes under a hidden name and renames the copy into place only when it is whole.
@Suite("Backup", .offThePool)
struct BackupTests {
    /// A ledger of `registrations` devices with 150-byte tokens (about 400 bytes of ledger each).
    private func ledger(in directory: TemporaryDirectory, registrations: Int) async throws -> Ledger {
        let ledger = try openTestLedger(directory)
        let padding = String(repeating: "x", count: 140)
        for start in stride(from: 0, to: registrations, by: 1000) {
            let operations: [LedgerOperation] = try (start..<min(start + 1000, registrations)).map {
                .register(try RegistrationToken("device-\($0):\(padding)"), platform: nil, appID: nil)
            }
            _ = try await ledger.append(WriteRequest(actor: "test", requestID: "r\(start)", operations: operations))
        }
        return ledger
    }

    @Test("a backup that runs out of disk fails, leaving neither the target nor a partial copy; with room it succeeds")
    func fullDisk() async throws {
        guard let mount = TmpfsMount(megabytes: 1) else {
            Issue.record("cannot mount a tmpfs here (not root?); the full-disk backup test did not run")
            return
        }
        defer { mount.unmount() }
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try await ledger(in: directory, registrations: 10_000)
        defer { ledger.close() }

        #expect(throws: StoreError.self) { try ledger.backup(to: mount.path + "/backups") }
        #expect(try FileManager.default.contentsOfDirectory(atPath: mount.path + "/backups") == [])

        let roomy = TemporaryDirectory()
        defer { roomy.remove() }
        try ledger.backup(to: roomy.path)
        #expect(try FileManager.default.contentsOfDirectory(atPath: roomy.path) == [ProjectID.default.rawValue])
        let copy = try Ledger.open(
            dataDirectory: roomy.path, project: .default, options: Ledger.Options(mode: .readOnly),
            logger: quietLogger)
        defer { copy.close() }
        #expect(try copy.readLog { try $0.head() } == ledger.readLog { try $0.head() })
        #expect(try copy.verify().isSound)
    }

    @Test("a backup into a target directory that holds other files is refused, and nothing is left beside it")
    func occupiedTarget() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try await ledger(in: directory, registrations: 10)
        defer { ledger.close() }
        let destination = TemporaryDirectory()
        defer { destination.remove() }
        let target = destination.path + "/" + ProjectID.default.rawValue
        try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: target + "/notes.txt", contents: Data("keep".utf8)))

        #expect(throws: StoreError.self) { try ledger.backup(to: destination.path) }
        #expect(try FileManager.default.contentsOfDirectory(atPath: destination.path) == [ProjectID.default.rawValue])
        #expect(try FileManager.default.contentsOfDirectory(atPath: target) == ["notes.txt"])

        // An empty target directory is fine: the copy takes its place.
        try FileManager.default.removeItem(atPath: target + "/notes.txt")
        try ledger.backup(to: destination.path)
        #expect(FileManager.default.fileExists(atPath: target + "/data.mdb"))
    }
}
