import ArgumentParser
import LedgerCore
import LedgerStore

extension LedgerCommand {
    /// `ledger log`: the event log, a line per event.
    struct Log: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print events, one line each (audit data: it carries tokens by design).",
            discussion: """
                --format json (the default: the export): one JSON object per line with everything, the message \
                and whole hashes included (docs/event-format.md). --format text: for reading — seq, time, \
                kind, the event's fields as name=value, the actor, the request id and the first 12 hex digits \
                of the chain hash.
                """)

        @OptionGroup var location: LedgerLocation

        @Option(name: .long, help: "Output format: json (the default) or text.")
        var format: OutputFormat = .json

        @Option(name: .customLong("from-seq"), help: "First seq to print.")
        var fromSeq: UInt64 = 1

        @Option(name: .customLong("to-seq"), help: "Last seq to print.")
        var toSeq: UInt64 = .max

        func validate() throws {
            guard fromSeq >= 1 else { throw ValidationError("--from-seq starts at 1") }
            guard toSeq >= fromSeq else { throw ValidationError("--to-seq must not be below --from-seq") }
        }

        func run() throws {
            let ledger = try location.openForReading()
            var output = BufferedOutput()
            try ledger.readLog { snapshot in
                try snapshot.forEachChainedEvent(from: fromSeq, through: toSeq) { event, previous, hash in
                    switch format {
                    case .json: output.write { EventJSON.write(event, prevHash: previous, hash: hash, into: &$0) }
                    case .text: output.write { $0 += EventText.line(event, hash: hash).utf8 }
                    }
                    return true
                }
            }
            output.flush()
        }
    }
}
