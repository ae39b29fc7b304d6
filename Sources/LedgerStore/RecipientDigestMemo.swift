import LedgerCore

/// The recipient count and digest of recent sends' audiences, kept by target so that a send whose audience
/// is exactly an earlier send's reuses its digest instead of hashing every recipient's token again.
///
/// An `audience` event's `recipientDigest` is SHA-256 over the tokens of all recipients in byte order
/// (SPEC §2.4): for a topic of 8,000 devices, about 1.3 MB hashed and the `tokens` database walked, per send.
/// An instance id is given to a token once and never to another (``LMDBProjection``), so the digest is a
/// function of the member set alone. A hit is decided by comparing the whole set with the remembered one —
/// one pass over `capacity / 8` bytes — never by a hash of it, so a reused digest is exactly the digest the
/// tokens would give. `ledger replay` and `ledger verify` never use the memo: they hash the tokens again.
///
/// Entries are evicted least recently used once the remembered sets exceed `byteBudget`.
///
/// - Note: Not thread-safe; `Ledger` keeps one behind a lock for its audience recorder and
///   ``Ledger/recordAudiences(of:time:)``.
final class RecipientDigestMemo {
    /// What an `audience` event records for one member set.
    struct Digest: Equatable {
        let count: Int
        let digest: [UInt8]
    }

    private struct Entry {
        var members: InstanceSet
        var digest: Digest
        var lastUse: UInt64
    }

    /// Memory allowed for remembered sets: a set is `capacity / 8` bytes, 125 KiB at a million instances,
    /// so the default keeps 64 audiences of a million-instance ledger or 320 of a 200,000-instance one.
    static let defaultByteBudget = 8 << 20

    let byteBudget: Int
    private var entries: [String: Entry] = [:]
    private var bytes = 0
    private var clock: UInt64 = 0
    private(set) var hits = 0
    private(set) var misses = 0

    init(byteBudget: Int = RecipientDigestMemo.defaultByteBudget) {
        self.byteBudget = byteBudget
    }

    /// The count and digest of `members`, the audience of a send to `target` under `precedence`: the
    /// remembered ones when the last audience seen for that target had exactly these members, otherwise
    /// `compute(members)`, remembered for the next send.
    func digest(
        of members: InstanceSet, target: MessageTarget, precedence: ConditionPrecedence,
        compute: (InstanceSet) throws -> Digest
    ) rethrows -> Digest {
        // A token's audience is at most one instance: hashing it costs less than remembering it.
        guard let key = Self.key(target, precedence) else { return try compute(members) }
        clock &+= 1
        if var entry = entries[key], entry.members.hasSameMembers(as: members) {
            hits += 1
            entry.lastUse = clock
            entries[key] = entry
            return entry.digest
        }
        misses += 1
        let digest = try compute(members)
        remember(Entry(members: members, digest: digest, lastUse: clock), under: key)
        return digest
    }

    private func remember(_ entry: Entry, under key: String) {
        let size = Self.size(of: entry.members)
        guard size <= byteBudget else { return }
        if let old = entries.removeValue(forKey: key) { bytes -= Self.size(of: old.members) }
        while bytes + size > byteBudget, let oldest = entries.min(by: { $0.value.lastUse < $1.value.lastUse }) {
            entries.removeValue(forKey: oldest.key)
            bytes -= Self.size(of: oldest.value.members)
        }
        entries[key] = entry
        bytes += size
    }

    /// The number of audiences remembered now.
    var count: Int { entries.count }

    private static func size(of set: InstanceSet) -> Int { set.words.count * MemoryLayout<UInt64>.stride }

    private static func key(_ target: MessageTarget, _ precedence: ConditionPrecedence) -> String? {
        switch target {
        case .topic(let name): "t" + name.rawValue
        // The same text parses differently under the two rules, so the rule is part of the key.
        case .condition(let text): "c" + precedence.rawValue + " " + text
        case .token: nil
        }
    }
}
