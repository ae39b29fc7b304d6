import ArgumentParser
import LedgerCore
import LedgerStore

extension LedgerCommand {
    /// `ledger log`: the event log as JSON lines.
    struct Log: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print events as JSON lines (audit data: it carries tokens by design).")

        @OptionGroup var common: CommonOptions

        @Option(name: .customLong("from-seq"), help: "First seq to print.")
        var fromSeq: UInt64 = 1

        @Option(name: .customLong("to-seq"), help: "Last seq to print.")
        var toSeq: UInt64 = .max

        func validate() throws {
            guard fromSeq >= 1 else { throw ValidationError("--from-seq starts at 1") }
            guard toSeq >= fromSeq else { throw ValidationError("--to-seq must not be below --from-seq") }
        }

        func run() throws {
            let ledger = try common.open(.readOnly)
            var output = BufferedOutput()
            try ledger.readLog { snapshot in
                try snapshot.forEachChainedEvent(from: fromSeq, through: toSeq) { event, previous, hash in
                    output.write { EventJSON.write(event, prevHash: previous, hash: hash, into: &$0) }
                    return true
                }
            }
            output.flush()
        }
    }
}
