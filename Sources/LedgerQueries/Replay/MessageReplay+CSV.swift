import LedgerCore
import LedgerStore

extension MessageReplay {
    /// `ledger replay --format csv` and the console's download: a `token,device` header, then one recipient per
    /// line in token byte order: its token written as a ``CSVCell`` (a token that begins with `-` as `"'-…"`, so
    /// that a spreadsheet does not read it as a formula), and its device number (what a version-2 digest is over).
    public var csv: [UInt8] {
        var out = Array("token,device\n".utf8)
        for (token, device) in zip(recipients, devices) {
            CSVCell.append(token.rawValue, to: &out)
            out.append(UInt8(ascii: ","))
            out.append(contentsOf: String(device).utf8)
            out.append(UInt8(ascii: "\n"))
        }
        return out
    }
}

/// A page of a topic's members at a moment, in instance-id (registration) order.
public struct MemberPage: Sendable, Equatable {
    public var count: Int
    public var members: [(instance: InstanceID, token: RegistrationToken)]
    /// The `after` of the next page; `nil` on the last.
    public var nextAfter: InstanceID?

    public static func == (a: MemberPage, b: MemberPage) -> Bool {
        a.count == b.count && a.nextAfter == b.nextAfter && a.members.map(\.instance) == b.members.map(\.instance)
    }
}

extension LedgerSnapshot {
    /// `topic`'s members at `seq` (now, when `nil`) after instance `after`, up to `limit` — resolving only
    /// their tokens, so a page of a million-member topic costs its bitmap and `limit` lookups. `nil` when the
    /// topic was never subscribed to.
    public func members(of topic: TopicName, at seq: UInt64?, after: InstanceID?, limit: Int) throws -> MemberPage? {
        guard let id = try topicID(of: topic) else { return nil }
        let set = try memberSet(of: id, at: seq, capacity: try instanceIDBound())
        let ids = set.ids(after: after, limit: limit + 1)
        var members: [(InstanceID, RegistrationToken)] = []
        for instance in ids.prefix(limit) {
            guard let token = try token(of: instance) else {
                throw StoreError(.corrupt, "instance \(instance) has no token")
            }
            members.append((instance, token))
        }
        return MemberPage(count: set.count, members: members, nextAfter: ids.count > limit ? members.last?.0 : nil)
    }
}
