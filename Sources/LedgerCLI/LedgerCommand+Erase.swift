import ArgumentParser
import LedgerCore
import LedgerStore

extension LedgerCommand {
    /// `ledger erase --token T --reason R`: what `POST …/registrations/{token}:erase` does, on a ledger no
    /// server holds.
    struct Erase: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Erase devices' identifiers: every event naming their tokens is rewritten with a pseudonym, "
                + "and the file compacted (stop the server first, or use its API).")

        @OptionGroup var common: CommonOptions

        @Option(help: "A registration token to erase (repeat for several, at most 1,000).")
        var token: [String] = []

        @Option(
            help: ArgumentHelp(
                "Why: kept in the log with the erasure. Refused when it holds a token of the project (in any "
                    + "form) or 32 or more characters in a row from A-Z a-z 0-9 + / _ -."))
        var reason: String

        func validate() throws {
            guard (1...1000).contains(token.count) else { throw ValidationError("give 1 to 1,000 --token") }
            guard !reason.allSatisfy(\.isWhitespace), reason.utf8.count <= 1024 else {
                throw ValidationError("--reason is required, at most 1,024 bytes")
            }
        }

        func run() async throws {
            let tokens: [RegistrationToken]
            do {
                tokens = try token.map { try RegistrationToken($0, field: "--token") }
            } catch {
                throw InputError("\(error)")
            }
            let ledger = try common.open(.readWrite)
            defer { ledger.close() }
            // A reason that holds an identifier would put it back in the log, for ever.
            let refusal = try ledger.read { snapshot in
                try ReasonIdentifiers(reason).refusal(
                    erasing: tokens, isKnownToken: { try snapshot.instanceID(of: $0) != nil },
                    holdsAnyAPNsToken: { try snapshot.holdsAnyAPNsToken(among: $0) })
            }
            if let refusal { throw InputError("--reason: \(refusal.rule.message)") }
            let receipt = try await ledger.append(
                WriteRequest(actor: "cli", requestID: "erase", operations: tokens.map { .erase($0, reason: reason) }))
            var missing = 0
            for (index, outcome) in receipt.outcomes.enumerated() {
                guard let seq = outcome.seq, let event = try ledger.read({ try $0.event(at: seq) }),
                    case .erased(let erasure) = event.body
                else {
                    missing += 1
                    print("token #\(index + 1): not known to the ledger (never registered, or erased already)")
                    continue
                }
                print(
                    "token #\(index + 1): erased at seq \(seq) as \(erasure.pseudonym.rawValue);"
                        + " \(erasure.redactedEvents) event(s) rewritten")
            }
            if missing > 0 { throw ExitCode(1) }
        }
    }
}
