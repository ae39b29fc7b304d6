import LMDBKit
import LedgerCore

/// The instance side of new memberships waits in `recentMemberships`, a log appended in seq order within
/// partitions of instances, and moves to `instanceTopics` a partition at a time.
///
/// Each membership is stored twice: under its topic (`topicMembers`, where a batch's members sit side by side)
/// and under its instance. A `batchAdd` of 1,000 tokens touches 1,000 instances spread over the whole
/// instance side, and LMDB copies and writes every page it changes. Keyed by instance, even a small tree of
/// new memberships has nearly all its pages rewritten by every such commit, and the more it holds the more
/// pages that is. Here a new membership is appended to the end of its
/// partition's run — `instance >> partitionShift`, 2,048 instances to a partition — so a commit writes the last
/// page or two of each partition it touches, however many entries wait. Once `LedgerLimits.recentMembershipsBeforeMove`
/// entries wait, the writer moves whole partitions, going round them, into `instanceTopics` within the same
/// transaction: sorted by instance and topic, each instance's entries in one `MDB_MULTIPLE` put, so each
/// instance's page is written once per round for all the entries it gathered, and one move dirties the pages
/// of at most 2,048 instances.
///
/// Both sides are read as one (``forEachMembership(of:txn:schema:_:)``), and an entry is in exactly one of them;
/// what a rebuild or a bulk import writes goes straight to `instanceTopics`. Reading an instance's recent
/// entries scans its partition's run (its entries are not together in it): the price of commits that do not
/// rewrite the run.
package enum RecentMemberships {
    /// Instances `p << partitionShift ..< (p + 1) << partitionShift` share partition `p`. Larger partitions mean
    /// fewer runs for a commit to write the end of and larger moves (2^12 measured the same rate as 2^11 under
    /// batchAdd, with p99 latency 77–82 ms against 55 and 96 MiB of heap against 58); smaller ones, less for a
    /// reader of one instance to scan.
    static let partitionShift: UInt32 = 11

    package static func partition(of instance: InstanceID) -> UInt32 { instance >> partitionShift }

    /// A `recentMemberships` value: `since u64 ‖ instance u32 ‖ topic u32`, so a partition's run is in seq order
    /// and a new membership goes at its end.
    package struct Entry: Equatable {
        package static let size = 16
        package var since: UInt64
        package var instance: InstanceID
        package var topic: TopicID

        init(since: UInt64, instance: InstanceID, topic: TopicID) {
            self.since = since
            self.instance = instance
            self.topic = topic
        }

        package init(_ bytes: UnsafeRawBufferPointer, at offset: Int = 0) {
            since = bytes.loadBigEndianUInt64(at: offset)
            instance = bytes.loadBigEndianUInt32(at: offset + 8)
            topic = bytes.loadBigEndianUInt32(at: offset + 12)
        }

        package var encoded: PackedBytes {
            var bytes = PackedBytes()
            bytes.append(since)
            bytes.append(instance)
            bytes.append(topic)
            return bytes
        }
    }

    // MARK: Reading both sides

    /// Calls `body` with each current membership of `instance` — topic and the seq it began at — from
    /// `instanceTopics` (ascending by topic) and then from its partition of `recentMemberships` (in seq order).
    static func forEachMembership(
        of instance: InstanceID, txn: LMDBTransaction, schema: LedgerSchema,
        _ body: (_ topic: TopicID, _ since: UInt64) throws -> Void
    ) throws {
        try txn.withCursor(schema.instanceTopics) { cursor in
            try cursor.forEachValueChunk(of: instance) { chunk in
                guard chunk.count % StoredMembership.size == 0 else {
                    throw StoreError(.corrupt, "instanceTopics holds a value of the wrong size")
                }
                for offset in stride(from: 0, to: chunk.count, by: StoredMembership.size) {
                    let membership = StoredMembership(chunk, at: offset)
                    try body(membership.id, membership.since)
                }
                return true
            }
        }
        try forEachRecent(inPartitionOf: instance, txn: txn, schema: schema) { entry in
            if entry.instance == instance { try body(entry.topic, entry.since) }
        }
    }

    /// Calls `body` with every entry of the partition `instance` belongs to, in seq order.
    static func forEachRecent(
        inPartitionOf instance: InstanceID, txn: LMDBTransaction, schema: LedgerSchema, _ body: (Entry) throws -> Void
    ) throws {
        try forEachRecent(inPartition: partition(of: instance), txn: txn, schema: schema, body)
    }

    /// Calls `body` with every entry of `partition`, in seq order.
    static func forEachRecent(
        inPartition partition: UInt32, txn: LMDBTransaction, schema: LedgerSchema, _ body: (Entry) throws -> Void
    ) throws {
        try txn.withCursor(schema.recentMemberships) { cursor in
            try cursor.forEachValueChunk(of: partition) { chunk in
                guard chunk.count % Entry.size == 0 else {
                    throw StoreError(.corrupt, "recentMemberships holds a value of the wrong size")
                }
                for offset in stride(from: 0, to: chunk.count, by: Entry.size) {
                    let entry = Entry(chunk, at: offset)
                    guard Self.partition(of: entry.instance) == partition else {
                        throw StoreError(
                            .corrupt, "recentMemberships holds instance \(entry.instance) in another partition")
                    }
                    try body(entry)
                }
                return true
            }
        }
    }

    /// How many memberships wait in `recentMemberships`, by instance: every partition read once.
    static func recentCounts(txn: LMDBTransaction, schema: LedgerSchema) throws -> [InstanceID: Int] {
        var counts: [InstanceID: Int] = [:]
        for partition in try partitions(txn: txn, schema: schema) {
            try forEachRecent(inPartition: partition, txn: txn, schema: schema) { counts[$0.instance, default: 0] += 1 }
        }
        return counts
    }

    /// The partitions that hold waiting entries, ascending.
    static func partitions(txn: LMDBTransaction, schema: LedgerSchema) throws -> [UInt32] {
        try txn.withCursor(schema.recentMemberships) { cursor in
            var partitions: [UInt32] = []
            var key = try cursor.first()?.key.loadBigEndianUInt32()
            while let partition = key {
                partitions.append(partition)
                key = partition == .max ? nil : try cursor.seek(partition + 1)?.key.loadBigEndianUInt32()
            }
            return partitions
        }
    }

    // MARK: Writing

    /// Appends a new membership's instance side.
    static func add(_ topic: TopicID, instance: InstanceID, since: UInt64, txn: LMDBTransaction, schema: LedgerSchema)
        throws
    {
        try txn.put(
            schema.recentMemberships, key: partition(of: instance),
            value: Entry(since: since, instance: instance, topic: topic).encoded)
    }

    /// Deletes a membership's instance side from `recentMemberships`; `false` when it is not there.
    static func remove(
        _ topic: TopicID, instance: InstanceID, since: UInt64, txn: LMDBTransaction, schema: LedgerSchema
    ) throws -> Bool {
        try txn.delete(
            schema.recentMemberships, key: partition(of: instance),
            value: Entry(since: since, instance: instance, topic: topic).encoded)
    }

    // MARK: Moving

    /// Once `recentMemberships` holds `limit` entries or more, moves whole partitions into `instanceTopics`,
    /// going round them from `cursor`, until fewer than `limit` wait (everything when `limit` is 0). Runs in
    /// the batch's write transaction, so a move commits with the batch or not at all. `moved` is told each
    /// instance whose entries moved.
    ///
    /// Going round means a partition waits about a round — `limit` new memberships — between moves, so each
    /// instance's page is written once for all the entries it gathered; a move touches the pages of one
    /// partition's instances at most.
    ///
    /// - Returns: the number of entries moved.
    @discardableResult
    static func moveIfFull(
        txn: LMDBTransaction, schema: LedgerSchema, limit: Int, cursor: MoveCursor,
        moved: (InstanceID) -> Void = { _ in }
    ) throws -> Int {
        var waiting = try txn.count(schema.recentMemberships)
        var total = 0
        while waiting > 0 && waiting >= limit {
            let count = try movePartition(txn: txn, schema: schema, from: &cursor.next, moved: moved)
            guard count > 0 else { throw StoreError(.corrupt, "recentMemberships counts entries it does not hold") }
            total += count
            waiting -= count
        }
        return total
    }

    /// Where the next move starts: the partition after the last one moved. Only the writer thread uses it; a
    /// position lost with an aborted transaction or a restart changes only which partition moves first.
    final class MoveCursor {
        var next: UInt32 = 0
    }

    /// Moves every entry of the first partition at or after `start` (going on from the first partition when
    /// the end is reached) into `instanceTopics`, and deletes the partition's run; `start` becomes the
    /// partition after it.
    private static func movePartition(
        txn: LMDBTransaction, schema: LedgerSchema, from start: inout UInt32, moved: (InstanceID) -> Void
    ) throws -> Int {
        let found = try txn.withCursor(schema.recentMemberships) { cursor in
            try (cursor.seek(start) ?? cursor.first()).map { $0.key.loadBigEndianUInt32() }
        }
        guard let partition = found else { return 0 }
        // (instance ‖ topic, since), sorted: each instance's entries become one run of `instanceTopics` values.
        var entries: [(pair: UInt64, since: UInt64)] = []
        try forEachRecent(inPartition: partition, txn: txn, schema: schema) { entry in
            entries.append((UInt64(entry.instance) << 32 | UInt64(entry.topic), entry.since))
        }
        entries.sort { $0.pair < $1.pair }
        var values: [UInt8] = []
        values.reserveCapacity(entries.count * StoredMembership.size)
        let put = try txn.cursor(schema.instanceTopics)
        var index = 0
        while index < entries.count {
            let instance = InstanceID(truncatingIfNeeded: entries[index].pair >> 32)
            values.removeAll(keepingCapacity: true)
            while index < entries.count, InstanceID(truncatingIfNeeded: entries[index].pair >> 32) == instance {
                let value = membershipValue(
                    TopicID(truncatingIfNeeded: entries[index].pair), since: entries[index].since)
                value.withLMDBBytes { values.append(contentsOf: $0) }
                index += 1
            }
            do {
                try values.withUnsafeBytes { values in
                    try put.putDuplicates(
                        instance, values: values, valueSize: StoredMembership.size, flags: .noDuplicateData)
                }
            } catch let error as LMDBError where error.code == .keyExists {
                throw StoreError(.corrupt, "instance \(instance) holds a membership on both of its sides")
            }
            moved(instance)
        }
        try txn.delete(schema.recentMemberships, key: partition)
        start = partition == .max ? 0 : partition + 1
        return entries.count
    }
}
