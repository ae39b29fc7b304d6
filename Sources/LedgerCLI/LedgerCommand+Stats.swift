import ArgumentParser
import LedgerCore
import LedgerStore

extension LedgerCommand {
    /// `ledger stats`: sizes of the ledger.
    struct Stats: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the ledger's sizes and head.")

        @OptionGroup var common: CommonOptions

        func run() throws {
            let ledger = try common.openForReading()
            let stats = try ledger.read { try $0.statistics() }
            let rows: [(String, String)] = [
                ("project", common.location.project),
                ("events", String(stats.events)),
                ("headTime", stats.headTime?.rfc3339 ?? ""),
                ("headHash", stats.headHash),
                ("instances", String(stats.instances)),
                ("registeredInstances", String(stats.registeredInstances)),
                ("topics", String(stats.topics)),
                ("subscriptions", String(stats.subscriptions)),
                ("messages", String(stats.messages)),
                ("usedBytes", String(stats.usedBytes)),
                ("mapBytes", String(stats.mapBytes)),
            ]
            switch common.format {
            case .json:
                var out = JSONObjectWriter()
                for (key, value) in rows {
                    if let number = Int(value) { out.field(key, number: number) } else { out.field(key, string: value) }
                }
                print(out.finish())
            case .text:
                for (key, value) in rows { print("\(key): \(value)") }
            }
        }
    }
}
