import ArgumentParser
import LedgerCore
import LedgerStore

extension ConditionPrecedence: ExpressibleByArgument {}

extension LedgerCommand {
    /// `ledger explain`: how a condition parses under a rule, and whom each part reaches.
    struct Explain: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print a condition's parsed tree with the audience size of each part.")

        @OptionGroup var common: CommonOptions

        @Option(help: "The condition, e.g. \"'A' in topics && !('B' in topics)\".")
        var condition: String

        @Option(help: "Evaluation rule: left-to-right (FCM's documented rule) or standard (&& before ||).")
        var precedence: ConditionPrecedence = .leftToRight

        @OptionGroup var moment: MomentOptions

        func run() throws {
            let parsed: Condition
            do {
                parsed = try Condition(parsing: condition, precedence: precedence, field: "--condition")
            } catch {
                throw InputError(error.description)
            }
            let ledger = try common.openForReading()
            let (seq, tree, total) = try ledger.read { snapshot in
                let seq = try moment.seq(in: snapshot)
                let tree = try snapshot.explain(parsed, at: seq)
                let total = try snapshot.universe(at: seq).count
                return (seq, tree, total)
            }
            switch common.format {
            case .json:
                var out = JSONObjectWriter()
                out.field("condition", string: parsed.text(precedence: precedence))
                out.field("precedence", string: precedence.rawValue)
                out.field("atSeq", number: seq)
                out.field("registeredInstances", number: total)
                out.field("tree", raw: json(tree))
                print(out.finish())
            case .text:
                print("condition: \(parsed.text(precedence: precedence))")
                print("rule: \(precedence.rawValue); state at seq \(seq); \(total) registered instances")
                for line in tree.lines() { print(line) }
            }
        }

        private func json(_ node: ExplainedCondition) -> String {
            var out = JSONObjectWriter()
            out.field("node", string: node.label)
            out.field("audienceSize", number: node.audienceSize)
            if !node.children.isEmpty {
                out.field("children", raw: "[" + node.children.map(json).joined(separator: ",") + "]")
            }
            return out.finish()
        }
    }
}

/// `--at TIME` or `--at-seq N`: the moment whose state a command reads (default: now).
struct MomentOptions: ParsableArguments {
    @Option(help: "A time (RFC 3339, a date, or microseconds): the state after the last event at or before it.")
    var at: String?

    @Option(name: .customLong("at-seq"), help: "A seq: the state after applying events 1…N.")
    var atSeq: UInt64?

    func validate() throws {
        if at != nil && atSeq != nil { throw ValidationError("give --at or --at-seq, not both") }
        if let at, LedgerTime(parsing: at) == nil {
            throw ValidationError("--at must be RFC 3339 (2026-03-01T12:00:00Z), a date (2026-03-01) or microseconds")
        }
    }

    /// The seq to read at: the head when neither option is given.
    func seq(in snapshot: LedgerSnapshot) throws -> UInt64 {
        let head = try snapshot.head().seq
        if let atSeq {
            guard atSeq <= head else { throw InputError("--at-seq \(atSeq) is past the head (seq \(head))") }
            return atSeq
        }
        if let at, let time = LedgerTime(parsing: at) { return try snapshot.seq(atOrBefore: time) }
        return head
    }
}
