import LedgerCore

/// The recipient count and digest of recent sends' audiences, kept by target so that a send whose audience
/// is exactly an earlier send's reuses its digest instead of hashing every recipient's device number again.
///
/// An `audience` event's `recipientDigest` is SHA-256 over the recipients' device numbers (their instance
/// ids) in ascending order, each in decimal followed by `\n` (``RecipientDigest/Version/devices``): the
/// members of the set themselves, so the digest is a function of the member set alone and hashing it reads
/// nothing from the ledger; it is still a pass over every recipient (16,163 of a million devices take
/// 1.39 ms: docs/performance.md). A hit is decided by comparing the whole set with the remembered one — one
/// pass over `capacity / 8` bytes — never by a hash of it, so a reused digest is exactly the digest the
/// device numbers would give. The memo holds only digests of the current version; `ledger replay` and
/// `ledger verify` never use it: they hash the recipients again, in the version each `audience` event names.
///
/// A topic's members need not even be read when none of them changed since its remembered audience: the
/// writer dates every membership change (``TopicChangeTracker``), and a send to a topic whose last change
/// is no later than the seq its remembered audience was taken at reuses it
/// (``unchangedDigest(of:at:changes:)``). Conditions are always read and compared.
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
        /// The seq of a send whose audience `members` is.
        var seq: UInt64
        var lastUse: UInt64
    }

    /// Memory allowed for remembered sets: a set is `capacity / 8` bytes, 125 KiB at a million instances,
    /// so the default keeps 64 audiences of a million-instance ledger or 320 of a 200,000-instance one.
    static let defaultByteBudget = 8 << 20

    let byteBudget: Int
    private var entries: [String: Entry] = [:]
    private var bytes = 0
    private var clock: UInt64 = 0
    /// Digests reused after comparing the members read with the remembered ones.
    private(set) var hits = 0
    /// Digests reused without reading the members (``unchangedDigest(of:at:changes:)``).
    private(set) var unreadHits = 0
    private(set) var misses = 0

    init(byteBudget: Int = RecipientDigestMemo.defaultByteBudget) {
        self.byteBudget = byteBudget
    }

    /// The remembered count and digest of the audience of a send at `seq` to `topic`, when the remembered
    /// audience was taken at a seq no later than `seq` and no membership of the topic changed after it
    /// (as `changes` dates them); otherwise `nil`, and the caller reads the members.
    func unchangedDigest(of topic: TopicName, at seq: UInt64, changes: TopicChangeTracker) -> Digest? {
        guard let key = Self.key(.topic(topic), .standard), var entry = entries[key], entry.seq <= seq,
            changes.lastChange(of: topic) <= entry.seq
        else { return nil }
        clock &+= 1
        unreadHits += 1
        // The members are the audience at `seq` too: nothing changed in between.
        entry.seq = seq
        entry.lastUse = clock
        entries[key] = entry
        return entry.digest
    }

    /// The count and digest of `members`, the audience of a send at `seq` to `target` under `precedence`:
    /// the remembered ones when the last audience seen for that target had exactly these members,
    /// otherwise `compute(members)`, remembered for the next send.
    func digest(
        of members: InstanceSet, target: MessageTarget, precedence: ConditionPrecedence, at seq: UInt64,
        compute: (InstanceSet) throws -> Digest
    ) rethrows -> Digest {
        // A token's audience is at most one instance: hashing it costs less than remembering it.
        guard let key = Self.key(target, precedence) else { return try compute(members) }
        clock &+= 1
        if var entry = entries[key], entry.members.hasSameMembers(as: members) {
            hits += 1
            entry.seq = seq
            entry.lastUse = clock
            entries[key] = entry
            return entry.digest
        }
        misses += 1
        let digest = try compute(members)
        remember(Entry(members: members, digest: digest, seq: seq, lastUse: clock), under: key)
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
