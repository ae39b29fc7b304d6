import ArgumentParser
import LedgerCore
import LedgerStore

extension LedgerCommand {
    /// `ledger backup DEST`: a consistent hot copy, safe while the server writes.
    struct Backup: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Write a consistent, compacted copy of the ledger to DEST/<project>/ (safe while a server runs).")

        @OptionGroup var common: CommonOptions

        @Argument(help: "Destination data directory; the copy opens with --data DEST.")
        var destination: String

        func run() throws {
            let ledger = try common.openForReading()
            let head = try ledger.readLog { try $0.head() }
            try ledger.backup(to: destination)
            let copy = try LedgerLocation.parse(["--data", destination, "--project", common.projectID.rawValue])
                .open(.readOnly)
            let copied = try copy.readLog { try $0.head() }
            switch common.format {
            case .json:
                var out = JSONObjectWriter()
                out.field("destination", string: destination)
                out.field("headSeq", number: copied.seq)
                print(out.finish())
            case .text:
                print(
                    "backed up \(copied.seq) events to \(destination)/\(common.projectID) (source head was seq \(head.seq))"
                )
            }
        }
    }
}
