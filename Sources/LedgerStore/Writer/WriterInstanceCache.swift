import LedgerCore

/// What the writer knows about instances from one transaction to the next: whether each is registered and
/// how many topics it holds — the two questions every subscription asks before it is appended.
///
/// A transaction's ``MemoizedProjection`` asks here before LMDB, and tells what it learns or changes. Under
/// batchAdd those questions were B-tree searches of `universe` and of both instance-side databases for every
/// token of every request (a fifth of the writer's samples); here they are
/// two array reads. The facts stay true only as long as nothing else writes the ledger, so:
///
/// - ``begin(transaction:)`` forgets everything unless the transaction starts from exactly the state of the
///   last commit recorded with ``committed(transaction:)``: LMDB numbers write transactions, and any other
///   write (a rebuild, a repair, an import through another path) takes a number in between;
/// - a transaction that never reaches ``committed(transaction:)`` — it threw, its commit failed, it is run
///   again after the map grew, its requests are retried one by one — leaves the facts marked as mid-way, and
///   the next ``begin(transaction:)`` forgets them.
///
/// Forgetting costs only the searches it saved; a fact is never kept past a change it did not see.
///
/// - Note: Not thread-safe: the writer's thread only.
final class WriterInstanceCache {
    /// Counts at or above this are not kept (the per-instance limit is far below it).
    static let unknownCount = UInt16.max
    /// Instances with larger ids are not kept, so that a damaged id cannot make the arrays huge.
    static let largestKeptInstance = InstanceID(1 << 26)

    private enum Registration: UInt8 {
        case unknown = 0, unregistered, registered
    }

    /// Indexed by instance id (ids start at 1; index 0 is unused).
    private var counts: [UInt16] = []
    private var registrations: [Registration] = []
    /// How many memberships of each instance wait in `recentMemberships` (an instance absent: none), once
    /// loaded: a first question about an instance's topic count asks here rather than read its partition whole.
    /// Keyed by id rather than indexed like the arrays above, so that every instance is kept, whatever its id.
    private var recentCounts: [InstanceID: Int]?
    /// The number of the write transaction the facts reflect the end of, or `nil` when they reflect none.
    private var validThrough: UInt64?
    /// A transaction has begun and not been recorded as committed.
    private var midway = false

    /// Starts write transaction number `transaction` (LMDB's `mdb_txn_id`).
    func begin(transaction: UInt64) {
        if midway || validThrough.map({ $0 &+ 1 }) != transaction { forget() }
        midway = true
    }

    /// Records that the transaction begun last committed as number `transaction`.
    func committed(transaction: UInt64) {
        validThrough = transaction
        midway = false
    }

    /// Forgets everything.
    func forget() {
        counts = []
        registrations = []
        recentCounts = nil
        validThrough = nil
    }

    /// The topics `instance` holds, if known.
    func topicCount(of instance: InstanceID) -> Int? {
        let index = Int(instance)
        guard index < counts.count, counts[index] != Self.unknownCount else { return nil }
        return Int(counts[index])
    }

    func setTopicCount(_ count: Int, of instance: InstanceID) {
        guard let index = slot(instance, in: &counts, unknown: Self.unknownCount) else { return }
        counts[index] = count >= 0 && count < Int(Self.unknownCount) ? UInt16(count) : Self.unknownCount
    }

    /// How many of `instance`'s memberships wait in `recentMemberships`, if the counts are loaded.
    func recentCount(of instance: InstanceID) -> Int? {
        recentCounts.map { $0[instance] ?? 0 }
    }

    /// Keeps every instance's count of memberships waiting in `recentMemberships`
    /// (``RecentMemberships/recentCounts(txn:schema:)``).
    func loadRecentCounts(_ loaded: [InstanceID: Int]) {
        recentCounts = loaded
    }

    /// A membership of `instance` was appended to (`change` 1) or deleted from (−1) `recentMemberships`.
    func recentChanged(_ instance: InstanceID, by change: Int) {
        guard let known = recentCounts?[instance, default: 0] else { return }
        let count = known + change
        // Below zero only if the counts were wrong: forgotten, to be read from LMDB again.
        guard count >= 0 else {
            recentCounts = nil
            return
        }
        recentCounts?[instance] = count == 0 ? nil : count
    }

    /// `instance`'s memberships moved from `recentMemberships` to `instanceTopics`.
    func recentMoved(_ instance: InstanceID) {
        recentCounts?[instance] = nil
    }

    /// Whether `instance` is registered, if known.
    func isRegistered(_ instance: InstanceID) -> Bool? {
        let index = Int(instance)
        guard index < registrations.count else { return nil }
        switch registrations[index] {
        case .unknown: return nil
        case .unregistered: return false
        case .registered: return true
        }
    }

    func setRegistered(_ registered: Bool, _ instance: InstanceID) {
        guard let index = slot(instance, in: &registrations, unknown: .unknown) else { return }
        registrations[index] = registered ? .registered : .unregistered
    }

    /// The index of `instance` in `array`, grown to hold it; `nil` for ids not kept.
    private func slot<Element>(_ instance: InstanceID, in array: inout [Element], unknown: Element) -> Int? {
        guard instance >= 1, instance <= Self.largestKeptInstance else { return nil }
        let index = Int(instance)
        if index >= array.count {
            array.append(contentsOf: repeatElement(unknown, count: max(index + 1, array.count * 2) - array.count))
        }
        return index
    }
}
