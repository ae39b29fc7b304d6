import ArgumentParser
import Foundation
import LedgerCore
import LedgerStore
import LedgerQueries

extension LedgerCommand {
    /// `ledger replay --message ID`: who a past message was addressed to, and whether that matches the record.
    struct Replay: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Reconstruct a past message's recipients and check them against its recorded audience.",
            discussion: """
                Exit status: 0 when the reconstruction matches the recorded audience event; 2 when it does not, or \
                when no audience is recorded for the message yet; 1 for bad input (unknown message, another \
                project's message). Output carries registration tokens: it is audit data.
                """)

        enum Format: String, ExpressibleByArgument, CaseIterable {
            case text, json, csv
        }

        @OptionGroup var location: LedgerLocation

        @Option(
            help:
                "Output format: text, json, or csv (the recipient list: a `token,device` header, one recipient per line)."
        )
        var format: Format = .text

        @Option(help: "The message: its id or its name, projects/P/messages/ID.")
        var message: String

        @Flag(help: "Recompute by folding the log from seq 1 in memory (independent of every index; O(log)).")
        var naive = false

        func run() throws {
            let messageID = try Self.messageID(message, project: location.projectID)
            let ledger = try location.openForReading()
            guard let replay = try ledger.read({ try MessageReplay.replay(messageID, in: $0, naive: naive) }) else {
                throw InputError("no message \(messageID) in project \(location.projectID)")
            }
            var output = BufferedOutput()
            switch format {
            case .csv:
                // The console's download is the same bytes (MessageReplay.csv); `write` adds the last newline.
                output.write { $0 += replay.csv.dropLast() }
            case .json:
                let object = AuditJSON.replay(replay, project: location.projectID, recipients: replay.recipients[...])
                let data = try AuditJSON.data(object)
                output.write { $0.append(contentsOf: data) }
            case .text:
                for line in Self.describe(replay, project: location.projectID, naive: naive) {
                    output.write { $0.append(contentsOf: Array(line.utf8)) }
                }
            }
            output.flush()
            if !replay.matchesRecord {
                printError(
                    replay.recorded == nil
                        ? "no audience event is recorded for message \(messageID) yet"
                        : "MISMATCH: the reconstructed recipients of message \(messageID) differ from its recorded audience"
                )
                throw ExitCode(2)
            }
        }

        /// The id of `text` (`123` or `projects/p/messages/123`), which must name a message of `project`.
        static func messageID(_ text: String, project: ProjectID) throws -> UInt64 {
            var idText = Substring(text)
            if text.hasPrefix("projects/") {
                let parts = text.split(separator: "/", omittingEmptySubsequences: false)
                guard parts.count == 4, parts[2] == "messages" else {
                    throw InputError("--message must be an id or projects/PROJECT/messages/ID, not \(text)")
                }
                guard parts[1] == project.rawValue else {
                    throw InputError(
                        "message \(text) belongs to project \(parts[1]), not \(project) (use --project \(parts[1]))")
                }
                idText = parts[3]
            }
            guard let id = UInt64(idText), id >= 1, id <= UInt64(Int64.max) else {
                throw InputError("a message id is a decimal number from 1 to \(Int64.max), not \(idText)")
            }
            return id
        }

        static func describe(_ replay: MessageReplay, project: ProjectID, naive: Bool) -> [String] {
            let digest = AuditJSON.hex(replay.recipientDigest)
            var lines = [
                "message:    projects/\(project)/messages/\(replay.messageID)",
                "sent:       seq \(replay.seq) at \(replay.time)",
                "target:     \(replay.target.kindName) \(replay.target.text)",
                "rule:       \(replay.precedence.rawValue)",
                "content:    " + (replay.contentForgotten.map { "forgotten by \($0)" } ?? "held"),
                "recipients: \(replay.recipientCount), digest \(digest)"
                    + (naive ? " (recomputed by folding the log from seq 1)" : " (from the temporal index)"),
                "digest of:  "
                    + (replay.digestVersion == .devices
                        ? "device numbers, ascending (version 2: `sort -n | sha256sum`)"
                        : "tokens, byte order (version 1: `LC_ALL=C sort | sha256sum`)"),
            ]
            if let recorded = replay.recorded {
                lines.append(
                    "recorded:   \(recorded.record.recipientCount), digest \(AuditJSON.hex(recorded.record.recipientDigest))"
                        + " (audience event at seq \(recorded.seq))")
                lines.append(
                    "matches:    \(replay.matchesRecord ? "yes" : "NO")"
                        + (replay.digestRecomputable
                            ? ""
                            : " (the count: \(replay.erasedRecipients) recipient(s) erased since, whose tokens this"
                                + " version-1 digest was taken over)"))
            } else {
                lines.append("recorded:   none yet")
            }
            lines.append("delivered:  \(replay.acknowledgedCount) of \(replay.recipientCount) acknowledged")
            if let counts = AuditJSON.PushCounts(replay.pushes) {
                lines.append(
                    "apns:       \(counts.accepted) accepted, \(counts.unregistered) unregistered, \(counts.failed) failed,"
                        + " \(counts.pending) pending, \(counts.expired) expired")
            }
            if let broadcast = replay.broadcast {
                // Apple does not say who held the channel: once it accepted the broadcast, the topic's members at
                // the send were addressed; a broadcast refused, expired or never made addressed nobody.
                switch broadcast.state {
                case .accepted: lines.append("apns:       \(broadcast.summary); every recipient addressed by it")
                case .pending: lines.append("apns:       \(broadcast.summary); no recipient addressed yet")
                case .rejected, .expired:
                    lines.append("apns:       \(broadcast.summary); no recipient addressed by it")
                }
            }
            lines.append("tokens (byte order), each with its device number:")
            for (index, token) in replay.recipients.enumerated() {
                lines.append(
                    "  \(token.rawValue)  #\(replay.devices[index])"
                        + (replay.acknowledged[index] ? "  (acknowledged)" : "")
                        + (replay.pushes[index].map { "  apns " + $0.summary } ?? "")
                        + (replay.broadcast.map { "  (\($0.recipientNote))" } ?? ""))
            }
            return lines
        }
    }
}
