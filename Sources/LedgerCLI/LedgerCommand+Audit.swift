import ArgumentParser
import Foundation
import LedgerCore
import LedgerStore
import LedgerQueries

extension LedgerCommand {
    /// `ledger audit instance|topic`: point-in-time questions about one instance or one topic.
    struct Audit: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "An instance's or a topic's history and its state at a moment (audit data: carries tokens).",
            subcommands: [Instance.self, Topic.self, Erasures.self])

        struct Erasures: ParsableCommand {
            static let configuration = CommandConfiguration(
                abstract:
                    "Every erasure and expiry: its seq and time, who, why, and the device (an erased one by its pseudonym)."
            )

            @OptionGroup var common: CommonOptions

            func run() throws {
                let ledger = try common.openForReading()
                let records = try ledger.read { try $0.erasures() }
                switch common.format {
                case .json:
                    print(String(decoding: try AuditJSON.data(AuditJSON.Erasures(records)), as: UTF8.self))
                case .text:
                    print("\(records.count) erasure(s) and expiries")
                    for record in records {
                        // The reason is the eraser's text: quoted, never raw on a terminal.
                        let rewritten =
                            record.redactedEvents.map { ", \($0) event(s) rewritten" + (record.linkable.map { " (\($0) linkable)" } ?? "") }
                            ?? ""
                        print(
                            "  seq \(record.seq) \(record.time.rfc3339) \(record.kind.rawValue) \(record.device.rawValue)"
                                + " by \(EventText.quoted(record.actor))\(rewritten): \(EventText.quoted(record.reason))"
                        )
                    }
                }
            }
        }

        struct Instance: ParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "An instance's registrations and subscriptions over time, and its topics at a moment.")

            @OptionGroup var common: CommonOptions

            @Argument(help: "The instance's registration token.")
            var token: String

            @OptionGroup var moment: MomentOptions

            func run() throws {
                let token: RegistrationToken
                do {
                    token = try RegistrationToken(self.token, field: "TOKEN")
                } catch {
                    throw InputError(error.description)
                }
                let ledger = try common.openForReading()
                let lines: [String] = try ledger.read { snapshot in
                    guard let audit = try snapshot.instanceAudit(token, at: try moment.seq(in: snapshot)) else {
                        throw InputError("token \(token.rawValue) was never registered in project \(common.projectID)")
                    }
                    switch common.format {
                    case .json:
                        return [
                            String(decoding: try AuditJSON.data(AuditJSON.instance(audit, in: snapshot)), as: UTF8.self)
                        ]
                    case .text:
                        return try Self.describe(audit, in: snapshot)
                    }
                }
                for line in lines { print(line) }
            }

            static func describe(_ audit: InstanceAudit, in snapshot: LedgerSnapshot) throws -> [String] {
                let json = try AuditJSON.instance(audit, in: snapshot)
                // Platform and app id are the device's input: quoted and escaped, never raw on a terminal.
                var header = "instance \(audit.token.rawValue)"
                if let platform = audit.platform { header += ", platform \(EventText.quoted(platform))" }
                if let appID = audit.appID { header += ", app \(EventText.quoted(appID))" }
                let state = audit.registeredAt ? "registered, \(audit.topicsAt.count) topic(s)" : "not registered"
                var lines = [header, "at \(momentText(json.at)): \(state)"]
                lines += audit.topicsAt.map { "  \($0.rawValue)" }
                lines.append("registrations:")
                for entry in json.registrations {
                    lines.append("  " + span(entry.fromSeq, entry.fromTime, entry.untilSeq, entry.untilTime))
                }
                lines.append("subscriptions:")
                for entry in json.subscriptions {
                    lines.append(
                        "  \(entry.topic)  " + span(entry.fromSeq, entry.fromTime, entry.untilSeq, entry.untilTime))
                }
                if !json.apnsTokens.isEmpty {
                    lines.append("apns tokens:")
                    for entry in json.apnsTokens {
                        lines.append(
                            "  \(entry.apnsToken)\(entry.sandbox ? " (sandbox)" : "")  "
                                + span(entry.fromSeq, entry.fromTime, entry.untilSeq, entry.untilTime))
                    }
                }
                let acknowledged = audit.deliveries.filter(\.acknowledged).count
                lines.append(
                    "deliveries: \(audit.deliveries.count) message(s), \(acknowledged) acknowledged "
                        + "(cursor at seq \(audit.acknowledgedThrough))")
                for delivery in audit.deliveries {
                    lines.append(
                        "  message \(delivery.messageID)  seq \(delivery.seq)  \(delivery.time)  "
                            + "\(delivery.target.kindName) \(EventText.quoted(delivery.target.text))  "
                            + (delivery.acknowledged ? "acknowledged" : "not acknowledged")
                            + (delivery.push.map { "  apns " + $0.summary } ?? ""))
                }
                return lines
            }
        }

        struct Topic: ParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "A topic's subscriber count at a moment, its members if asked, and its count over time.")

            @OptionGroup var common: CommonOptions

            @Argument(help: "The topic name (a leading /topics/ is accepted).")
            var name: String

            @OptionGroup var moment: MomentOptions

            @Flag(help: "List the members' tokens (byte order).")
            var members = false

            func run() throws {
                let topic: TopicName
                do {
                    topic = try TopicName(name, field: "NAME")
                } catch {
                    throw InputError(error.description)
                }
                let ledger = try common.openForReading()
                let lines: [String] = try ledger.read { snapshot in
                    guard
                        let audit = try snapshot.topicAudit(topic, at: try moment.seq(in: snapshot), members: members)
                    else {
                        throw InputError(
                            "topic \(topic.rawValue) never had a subscriber in project \(common.projectID)")
                    }
                    let json = try AuditJSON.topic(
                        audit, members: audit.members?[...], history: audit.history[...], in: snapshot)
                    switch common.format {
                    case .json:
                        return [String(decoding: try AuditJSON.data(json), as: UTF8.self)]
                    case .text:
                        var lines = [
                            "topic \(audit.topic.rawValue) at \(momentText(json.at)): \(audit.subscriberCount) subscriber(s)"
                        ]
                        if let members = audit.members { lines += members.map { "  \($0.rawValue)" } }
                        lines.append("count history (seq, time, subscribers after it):")
                        for entry in json.history ?? [] {
                            lines.append("  \(entry.seq)  \(entry.time)  \(entry.count)")
                        }
                        return lines
                    }
                }
                for line in lines { print(line) }
            }
        }
    }
}

/// `seq N (time)` of a moment.
private func momentText(_ moment: AuditJSON.Moment) -> String {
    "seq \(moment.seq) (\(moment.time ?? "before the first event"))"
}

/// `from seq A (time) until seq B (time)` of an interval.
private func span(_ fromSeq: UInt64, _ fromTime: String, _ untilSeq: UInt64?, _ untilTime: String?) -> String {
    let from = "from seq \(fromSeq) (\(fromTime))"
    guard let untilSeq else { return from + ", still holds" }
    return from + " until seq \(untilSeq) (\(untilTime ?? "?"))"
}
