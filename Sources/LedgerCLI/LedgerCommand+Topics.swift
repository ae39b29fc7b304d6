import ArgumentParser
import Foundation
import LedgerCore
import LedgerStore
import LedgerQueries

extension LedgerCommand {
    /// `ledger topics`: every topic with its subscriber count now.
    struct Topics: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the project's topics with their subscriber counts now.",
            discussion: """
                Every topic that ever had a subscriber is listed, with 0 once it has none. The same list over \
                HTTP is GET /v1/projects/{p}/topics (paged). A topic's count at a past moment: `ledger audit \
                --topic T --at TIME`.
                """)

        enum Format: String, ExpressibleByArgument, CaseIterable {
            case text, json, csv
        }

        enum Sort: String, ExpressibleByArgument, CaseIterable {
            case name, subscribers
        }

        @OptionGroup var location: LedgerLocation

        @Option(help: "Output format: text (aligned columns), json, or csv (a `topic,subscribers` header).")
        var format: Format = .text

        @Option(help: "Order: name (byte order) or subscribers (most first, then by name).")
        var sort: Sort = .name

        func run() throws {
            let ledger = try location.openForReading()
            defer { ledger.close() }
            let topics = try ledger.read {
                try $0.topicsWithCounts(orderedBy: sort == .name ? .name : .subscribers)
            }
            var output = BufferedOutput()
            switch format {
            case .csv:
                // Topic names are [A-Za-z0-9-_.~%]+: only one that begins with `-` needs a CSVCell's quoting.
                output.write { $0 += "topic,subscribers".utf8 }
                for entry in topics {
                    output.write {
                        CSVCell.append(entry.topic.rawValue, to: &$0)
                        $0 += ",\(entry.subscribers)".utf8
                    }
                }
            case .json:
                let data = try JSONSerialization.data(
                    withJSONObject: [
                        "topics": topics.map { ["name": $0.topic.rawValue, "subscriberCount": $0.subscribers] }
                    ], options: [.sortedKeys])
                output.write { $0 += data }
            case .text:
                let width = max(11, topics.map { String($0.subscribers).count }.max() ?? 0)
                output.write { $0 += (String(repeating: " ", count: width - 11) + "subscribers  topic").utf8 }
                for entry in topics {
                    let count = String(entry.subscribers)
                    output.write {
                        $0 +=
                            (String(repeating: " ", count: width - count.count) + count + "  " + entry.topic.rawValue)
                            .utf8
                    }
                }
            }
            output.flush()
        }
    }
}
