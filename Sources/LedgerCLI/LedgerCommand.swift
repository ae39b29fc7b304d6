import ArgumentParser
import Foundation
import LedgerCore
import LedgerStore
import Logging

/// `ledger`: the TopicLedger command line.
@main
struct LedgerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ledger",
        abstract: "TopicLedger: an FCM-compatible topic-messaging server on an event-sourced LMDB ledger.",
        subcommands: [
            Serve.self, Log.self, Replay.self, Audit.self, Verify.self, Rebuild.self, Stats.self, Import.self,
            Explain.self, Backup.self, CheckpointCommand.self, Prove.self, VerifyProof.self, Topics.self,
            Cluster.self, Erase.self, Witness.self,
        ]
    )

    /// Every file and directory a `ledger` command creates — ledgers, their lock files, backups, copies for
    /// peers, checkpoint keys — is its owner's alone (0600, 0700), whatever umask it was started with: a
    /// ledger holds registration tokens.
    static func main() async {
        umask(0o077)
        await main(nil)
    }
}

/// Where the ledger is: the options every subcommand shares.
struct LedgerLocation: ParsableArguments {
    @Option(name: .long, help: "Data directory holding one ledger per project.")
    var data: String = "./ledger-data"

    @Option(name: .long, help: "Project id.")
    var project: String = ProjectID.default.rawValue

    @Option(
        name: .long,
        help: ArgumentHelp(
            "The LMDB map size a ledger is opened with, in bytes (default 1 GiB); it doubles whenever it fills.",
            visibility: .hidden))
    var initialMapSize: Int?

    func validate() throws {
        if let initialMapSize, !(Self.mapSizeRange ~= initialMapSize) {
            throw ValidationError("--initial-map-size must be from 65536 to 2^40 bytes")
        }
        do {
            _ = try ProjectID(project, field: "--project")
        } catch {
            throw ValidationError(error.description)
        }
    }

    var projectID: ProjectID { try! ProjectID(project) }

    static let mapSizeRange = (1 << 16)...(1 << 40)

    /// Opens the project's ledger.
    func open(_ mode: Ledger.Options.Mode, forRebuild: Bool = false, recordsAudiences: Bool = true) throws -> Ledger {
        var logger = Logger(label: "ledger")
        logger.logLevel = .warning
        var options = Ledger.Options(mode: mode)
        options.forRebuild = forRebuild
        options.recordsAudiences = recordsAudiences
        if let initialMapSize { options.initialMapBytes = initialMapSize }
        return try Ledger.open(dataDirectory: data, project: projectID, options: options, logger: logger)
    }

    /// Opens the project's ledger for a command that reads it, never showing what `erasures.jsonl` says is
    /// erased: a ledger restored from a copy older than an erasure has the journal's erasures applied first,
    /// by opening it for writing as a server would (``Ledger/pendingJournaledErasures()``); when another process
    /// holds the writer lock, or they cannot be applied, the command is refused with an error naming the
    /// journal. A ledger with nothing pending (every ledger but a fresh restore) is opened read-only and left
    /// untouched.
    ///
    /// - Throws: `StoreError` from opening, or ``InputError`` naming `erasures.jsonl`.
    func openForReading() throws -> Ledger {
        if let ledger = try openIfNothingPending() { return ledger }
        do {
            // A writer applies them when it opens (and compacts the file); closing it leaves them durable.
            try open(.readWrite).close()
        } catch let error as StoreError where error.code == .locked {
            throw InputError(
                "the ledger does not hold erasures listed in \(journal) (restored from an older copy?), and"
                    + " another process holds its writer lock, so they cannot be applied here: run this command"
                    + " again once that process has stopped (a server applies them when it opens the ledger)")
        } catch {
            throw InputError("erasures listed in \(journal) could not be applied to the restored ledger: \(error)")
        }
        guard let ledger = try openIfNothingPending() else {
            throw InputError("erasures listed in \(journal) are still not applied to the restored ledger")
        }
        return ledger
    }

    /// The ledger opened read-only, or `nil` (and closed again, before any other opening in this process) when
    /// the journal has erasures it does not hold.
    private func openIfNothingPending() throws -> Ledger? {
        let ledger = try open(.readOnly)
        return try ledger.pendingJournaledErasures() == 0 ? ledger : nil
    }

    /// The path of the ledger's erasure journal, as the operator sees it.
    private var journal: String { "\(data)/\(project)/erasures.jsonl" }
}

/// The ledger's location and the output format (text or json).
struct CommonOptions: ParsableArguments {
    @OptionGroup var location: LedgerLocation

    @Option(name: .long, help: "Output format: text or json.")
    var format: OutputFormat = .text

    var data: String { location.data }
    var projectID: ProjectID { location.projectID }

    func open(_ mode: Ledger.Options.Mode, forRebuild: Bool = false, recordsAudiences: Bool = true) throws -> Ledger {
        try location.open(mode, forRebuild: forRebuild, recordsAudiences: recordsAudiences)
    }

    /// See ``LedgerLocation/openForReading()``.
    func openForReading() throws -> Ledger {
        try location.openForReading()
    }
}

enum OutputFormat: String, ExpressibleByArgument, CaseIterable {
    case text, json
}

/// Bad input found while running (not while parsing arguments): reported without the usage text.
struct InputError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Writes a line to standard output at once (not held in stdio's buffer when stdout is a file or pipe).
func printNow(_ text: String) {
    FileHandle.standardOutput.write(Data((text + "\n").utf8))
}

/// Writes to standard error (results go to standard output).
func printError(_ text: String) {
    FileHandle.standardError.write(Data((text + "\n").utf8))
}

/// Buffered standard output for long streams (`ledger log`).
struct BufferedOutput {
    private var buffer: [UInt8] = []

    init() { buffer.reserveCapacity(1 << 16) }

    /// Appends one line: `render` appends its bytes to the buffer, then a newline follows.
    mutating func write(_ render: (inout [UInt8]) -> Void) {
        render(&buffer)
        buffer.append(UInt8(ascii: "\n"))
        if buffer.count >= 1 << 16 { flush() }
    }

    mutating func flush() {
        guard !buffer.isEmpty else { return }
        FileHandle.standardOutput.write(Data(buffer))
        buffer.removeAll(keepingCapacity: true)
    }
}
