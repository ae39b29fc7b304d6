import ArgumentParser
import LedgerCore
import LedgerStore

extension LedgerCommand {
    /// `ledger verify`: the hash chain and the projections, checked against the log.
    struct Verify: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check the hash chain and that projections equal a rebuild; exit 0 if sound, 2 if not.")

        @OptionGroup var common: CommonOptions

        func run() throws {
            let ledger = try common.open(.readOnly)
            let report = try ledger.verify()
            switch common.format {
            case .json:
                var out = JSONObjectWriter()
                out.field("sound", bool: report.isSound)
                out.field("events", number: report.events)
                out.field(
                    "problems", raw: "[" + report.problems.map(JSONObjectWriter.quoted).joined(separator: ",") + "]")
                print(out.finish())
            case .text:
                if report.isSound {
                    print("sound: \(report.events) events, hash chain intact, projections equal a rebuild")
                } else {
                    print("DAMAGED: \(report.problems.count) problem(s) in \(report.events) events")
                    for problem in report.problems { print("  - \(problem)") }
                }
            }
            if !report.isSound { throw ExitCode(2) }
        }
    }
}
