import ArgumentParser
import Foundation
import LedgerCore
import LedgerStore

extension LedgerCommand {
    /// `ledger import FILE`: builds a ledger from JSON lines of operations, without a server.
    struct Import: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Append operations from a JSON-lines file (- for standard input); see docs/operations.md.")

        @OptionGroup var common: CommonOptions

        @Argument(help: "JSON-lines file of operations, or - for standard input.")
        var file: String

        func run() async throws {
            let text: String
            if file == "-" {
                text = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
            } else {
                guard let data = FileManager.default.contents(atPath: file) else {
                    throw ValidationError("cannot read \(file)")
                }
                text = String(decoding: data, as: UTF8.self)
            }
            let requests = try OperationImport.requests(fromJSONLines: text)
            // Each send's audience is recorded right after its request, with the request's time, so that an
            // import gives the same log every time (a background recorder would interleave by timing).
            let ledger = try common.open(.readWrite, recordsAudiences: false)
            defer { ledger.close() }
            var appended = 0
            var unchanged = 0
            var audiences = 0
            var rejected: [String] = []
            for request in requests {
                let receipt = try await ledger.append(request)
                for (index, outcome) in receipt.outcomes.enumerated() {
                    switch outcome {
                    case .rejected(let rejection):
                        rejected.append("request \(request.requestID) operation \(index + 1): \(rejection)")
                    case .unchanged: unchanged += 1
                    case .appended, .sent: appended += 1
                    }
                }
                audiences += try await ledger.recordAudiences(of: receipt, time: request.time).count
            }
            for line in rejected.prefix(20) { printError("rejected: \(line)") }
            if rejected.count > 20 { printError("rejected: … and \(rejected.count - 20) more") }
            let head = try ledger.readLog { try $0.head() }
            switch common.format {
            case .json:
                var out = JSONObjectWriter()
                out.field("appended", number: appended)
                out.field("unchanged", number: unchanged)
                out.field("audiences", number: audiences)
                out.field("rejected", number: rejected.count)
                out.field("headSeq", number: head.seq)
                print(out.finish())
            case .text:
                print(
                    "appended \(appended) events, rejected \(rejected.count) operations, recorded \(audiences)"
                        + " audience event(s); head seq \(head.seq)"
                        + (unchanged > 0 ? "; \(unchanged) operation(s) changed nothing and appended nothing" : ""))
            }
            if !rejected.isEmpty { throw ExitCode(1) }
        }
    }
}
