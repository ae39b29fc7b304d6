import ArgumentParser
import Foundation
import LedgerCore
import LedgerStore

extension LedgerCommand {
    /// `ledger rebuild`: every projection folded again from the log.
    struct Rebuild: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Rebuild all projections from the log (needs exclusive access: stop the server first).")

        @OptionGroup var common: CommonOptions

        func run() throws {
            let ledger = try common.open(.readWrite, forRebuild: true)
            defer { ledger.close() }
            let bar = ProgressBar(enabled: isatty(STDERR_FILENO) == 1)
            let start = Date()
            let events = try ledger.rebuildProjections { done, total in bar.show(done: done, total: total) }
            bar.finish()
            let seconds = Date().timeIntervalSince(start)
            let rate = seconds > 0 ? Int(Double(events) / seconds) : 0
            switch common.format {
            case .json:
                var out = JSONObjectWriter()
                out.field("events", number: events)
                out.field("seconds", raw: String(format: "%.3f", seconds))
                out.field("eventsPerSecond", number: rate)
                print(out.finish())
            case .text:
                print(
                    "rebuilt projections from \(events) events in \(String(format: "%.2f", seconds)) s (\(rate) events/s)"
                )
            }
        }
    }
}

/// A one-line progress bar on standard error, drawn only on a terminal.
struct ProgressBar {
    let enabled: Bool

    func show(done: UInt64, total: UInt64) {
        guard enabled else { return }
        let fraction = total == 0 ? 1 : Double(done) / Double(total)
        let width = 30
        let filled = Int(fraction * Double(width))
        let bar = String(repeating: "#", count: filled) + String(repeating: " ", count: width - filled)
        printErrorInline("\r[\(bar)] \(Int(fraction * 100))% \(done)/\(total) events")
    }

    func finish() {
        guard enabled else { return }
        printErrorInline("\n")
    }

    private func printErrorInline(_ text: String) {
        FileHandle.standardError.write(Data(text.utf8))
    }
}
