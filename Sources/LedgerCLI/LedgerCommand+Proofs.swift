import ArgumentParser
import Foundation
import LedgerCore
import LedgerServer
import LedgerStore
import LedgerQueries

extension LedgerCommand {
    /// `ledger checkpoint`: a freshly signed checkpoint of the log (a C2SP signed note), or the verifier key.
    struct CheckpointCommand: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "checkpoint",
            abstract: "Sign a checkpoint of the project's log (tree size and Merkle root) and print it.",
            discussion: """
                The signing key is <data>/<project>/checkpoint.key (mode 0600), made on first use; every \
                checkpoint signed is kept in <data>/<project>/checkpoints.jsonl. Works beside a running server. \
                Formats: docs/event-format.md; what an auditor does with them: docs/compliance.md.
                """)

        @OptionGroup var location: LedgerLocation

        @OptionGroup var signing: CheckpointConfig

        @Flag(help: "Print the verifier key line (`<name>+<key hash>+<base64 key>`) instead.")
        var publicKey = false

        func run() throws {
            let ledger = try location.openForReading()
            defer { ledger.close() }
            let keeper = try signing.keeper(data: location.data, project: location.projectID)
            if publicKey {
                printNow(keeper.signer.verifier.keyLine)
                return
            }
            let note = try ledger.read { try keeper.sign($0).note }
            FileHandle.standardOutput.write(Data(note.utf8))
        }
    }

    /// `ledger prove`: a message's inclusion proof, or a consistency proof between two tree sizes.
    struct Prove: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Prove a message's events are in the signed log, or that an older log is a prefix of today's.",
            discussion: """
                --message ID: the message's `sent` and `audience` events with their inclusion proofs against a \
                checkpoint signed now. --consistency --from M [--to N]: RFC 9162's consistency proof between the \
                trees of the first M and N events (N: the whole log). Check either with `ledger verify-proof` or \
                tools/merkle/verify_proof.py, knowing only the verifier key (`ledger checkpoint --public-key`).
                """)

        @OptionGroup var options: CommonOptions

        @OptionGroup var signing: CheckpointConfig

        @Option(help: "The message: its id or its name, projects/P/messages/ID.")
        var message: String?

        @Flag(help: "Prove consistency between two tree sizes instead.")
        var consistency = false

        @Option(help: "With --consistency: the older tree size.")
        var from: UInt64?

        @Option(help: "With --consistency: the newer tree size (default: the whole log).")
        var to: UInt64?

        func validate() throws {
            guard (message != nil) != consistency else {
                throw ValidationError("give either --message ID or --consistency --from M")
            }
            if consistency && from == nil { throw ValidationError("--consistency needs --from M") }
            if !consistency && (from != nil || to != nil) {
                throw ValidationError("--from and --to go with --consistency")
            }
        }

        func run() throws {
            let ledger = try options.openForReading()
            defer { ledger.close() }
            if let message {
                let messageID = try Replay.messageID(message, project: options.projectID)
                let keeper = try signing.keeper(data: options.data, project: options.projectID)
                let proof = try ledger.read { snapshot -> LedgerProofs.MessageProof? in
                    let signed = try keeper.sign(snapshot)
                    return try LedgerProofs.messageProof(
                        messageID, in: snapshot, checkpoint: signed.note, size: signed.checkpoint.size)
                }
                guard let proof else { throw InputError("no message \(messageID) in project \(options.projectID)") }
                switch options.format {
                case .json: try printJSON(proof)
                case .text:
                    FileHandle.standardOutput.write(Data(proof.checkpoint.utf8))
                    for entry in proof.entries {
                        printNow(
                            "\(entry.kind) event at seq \(entry.seq): \(entry.inclusionProof.count) proof hashes")
                    }
                    printNow("(use --format json for the proof itself)")
                }
            } else {
                let proof = try ledger.read { snapshot in
                    let head = try snapshot.head().seq
                    let to = self.to ?? head
                    guard let from, from <= to, to <= head else {
                        throw InputError("--from and --to must satisfy from ≤ to ≤ \(head) (the log's size)")
                    }
                    return try LedgerProofs.consistencyProof(from: from, to: to, in: snapshot)
                }
                switch options.format {
                case .json: try printJSON(proof)
                case .text:
                    printNow(
                        "consistency \(proof.from) → \(proof.to): \(proof.proof.count) proof hashes "
                            + "(--format json for them)")
                }
            }
        }

        /// `value` as one line of JSON, keys sorted and slashes unescaped (as the audit output is written).
        private func printJSON(_ value: some Encodable) throws {
            printNow(String(decoding: try AuditJSON.data(value), as: UTF8.self))
        }
    }

    /// Where `ledger checkpoint` and `ledger prove` find a project's signing settings: the server's config file.
    struct CheckpointConfig: ParsableArguments {
        @Option(
            help: """
                The server's config file: its projects.<project>.checkpoint sets the origin, key name and key \
                file (docs/server.md). Give the one the server runs with, so that both sign alike.
                """)
        var config: String?

        /// The project's checkpoint keeper, with the configured settings (the defaults without --config).
        func keeper(data: String, project: ProjectID) throws -> CheckpointKeeper {
            var settings = CheckpointSettings()
            if let config {
                do {
                    settings = try ServerConfiguration.load(path: config).checkpoints[project] ?? settings
                } catch let error as LedgerCoreError {
                    throw InputError(error.description)
                }
            }
            return try CheckpointKeeper.open(dataDirectory: data, project: project, settings: settings)
        }
    }

    /// `ledger verify-proof FILE --public-key KEYLINE`: checks a proof offline.
    struct VerifyProof: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "verify-proof",
            abstract: "Check a proof from `ledger prove --format json` with only the verifier key.",
            discussion: "Exit status: 0 when the proof holds; 2 when it does not; 1 for unreadable input.")

        @Argument(help: "The proof file (JSON), or - for standard input.")
        var file: String

        @Option(help: "The verifier key line, from `ledger checkpoint --public-key`.")
        var publicKey: String

        @Option(
            name: .customLong("witness"),
            help: "A witness's vkey (`ledger witness --public-key`) whose cosignature counts. Repeatable.")
        var witnesses: [String] = []

        @Option(help: "Cosignatures of the --witness keys the checkpoint must carry (default: all of them).")
        var quorum: Int?

        func validate() throws {
            if let quorum {
                guard !witnesses.isEmpty else { throw ValidationError("--quorum goes with --witness keys") }
                guard (1...witnesses.count).contains(quorum) else {
                    throw ValidationError("--quorum is between 1 and the number of --witness keys")
                }
            }
        }

        func run() throws {
            guard let key = NoteVerifier(keyLine: publicKey) else {
                throw InputError("--public-key is not a verifier key line (<name>+<key hash>+<base64 key>)")
            }
            let cosigners = try witnesses.map { vkey in
                guard let key = CosignatureVerifier(vkey: vkey) else {
                    throw InputError("--witness \(vkey) is not a cosigner vkey (<name>+<key id>+<base64(0x04 ‖ key)>)")
                }
                return key
            }
            let data: Data? =
                file == "-"
                ? FileHandle.standardInput.readDataToEndOfFile() : FileManager.default.contents(atPath: file)
            guard let data, (try? JSONSerialization.jsonObject(with: data)) is [String: Any] else {
                throw InputError("\(file) is not a JSON proof")
            }
            do {
                printNow(
                    "verified: "
                        + (try LedgerProofs.verify(
                            data, key: key, witnesses: cosigners, quorum: quorum ?? Set(cosigners).count)))
            } catch {
                printNow("not verified: \(error)")
                throw ExitCode(2)
            }
        }
    }
}
