import ArgumentParser
import LedgerCore
import LedgerStore
import LedgerQueries

extension LedgerCommand {
    /// `ledger verify`: the hash chain and the projections, checked against the log.
    struct Verify: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check the hash chain and that projections equal a rebuild; exit 0 if sound, 2 if not.")

        @OptionGroup var common: CommonOptions

        @Flag(help: "Also recompute every recorded audience and compare it with its audience event (slower).")
        var audiences = false

        func run() throws {
            let ledger = try common.openForReading()
            let report = try ledger.verify(checkAudiences: audiences)
            switch common.format {
            case .json:
                var out = JSONObjectWriter()
                out.field("sound", bool: report.isSound)
                out.field("events", number: report.events)
                out.field("sendsWithoutAudience", number: report.sendsWithoutAudience)
                out.field("audiencesChecked", number: report.audiencesChecked)
                out.field("audiencesCountOnly", number: report.audiencesCountOnly)
                out.field("erasures", number: report.erasures)
                out.field("redactedEvents", number: report.redactedEvents)
                out.field("linkable", number: report.linkable)
                out.field(
                    "problems", raw: "[" + report.problems.map(JSONObjectWriter.quoted).joined(separator: ",") + "]")
                print(out.finish())
            case .text:
                if report.isSound {
                    print(
                        "sound: \(report.events) events, hash chain intact, projections equal a rebuild"
                            + (audiences ? ", \(report.audiencesChecked) recorded audiences match a replay" : ""))
                    if report.audiencesCountOnly > 0 {
                        print(
                            "note: \(report.audiencesCountOnly) of them were compared by count alone: their digests"
                                + " (version 1) are over tokens of which one was erased since")
                    }
                    if report.erasures > 0 {
                        print(
                            "erasures: \(report.erasures); \(report.redactedEvents) event(s) rewritten by them keep their"
                                + " hashes (chained and in the tree) and are each accounted for by an erased event")
                    }
                    if report.linkable > 0 {
                        print(
                            "linkable: \(report.linkable) rewritten event(s) predate sealed fields: their hashes are over"
                                + " the erased identifiers, which a holder of one can test (docs/compliance.md)")
                    }
                    if report.sendsWithoutAudience > 0 {
                        print(
                            "note: \(report.sendsWithoutAudience) send(s) have no audience event yet; a running server"
                                + " records them shortly, and the next writer to open the ledger records any left")
                    }
                } else {
                    print("DAMAGED: \(report.problems.count) problem(s) in \(report.events) events")
                    for problem in report.problems { print("  - \(problem)") }
                }
            }
            if !report.isSound { throw ExitCode(2) }
        }
    }
}
