import LMDBKit
import LedgerCore

/// A consistent, read-only view of a ledger: the log, current state, and state at any past seq.
///
/// "State at seq N" is the state after applying events 1…N. The audience of a send at seq S is taken
/// from the state at S (the send itself changes no subscription).
///
/// - Note: Valid only inside the ``Ledger/read(_:)`` closure that lends it.
public struct LedgerSnapshot {
    package let txn: LMDBTransaction
    package let schema: LedgerSchema

    package init(txn: LMDBTransaction, schema: LedgerSchema) {
        self.txn = txn
        self.schema = schema
    }

    // MARK: Log

    /// The last appended event's seq, time and hash (seq 0 for an empty ledger).
    public func head() throws -> LedgerHead {
        try txn.withValue(in: schema.meta, forKey: MetaKey.head) { try $0.map(LedgerHead.init) } ?? .empty
    }

    /// The event at `seq`, or `nil` past the head.
    public func event(at seq: UInt64) throws -> LedgerEvent? {
        try txn.withValue(in: schema.log, forKey: seq) { record in
            guard let record else { return nil }
            return try EventCodec.decode(HashChain.split(record: record).encodedEvent)
        }
    }

    /// Like ``forEachEvent(from:through:_:)``, also lending each event's previous hash (what the JSON-lines
    /// export prints as `prevHash`). Calls nothing when `from` is past the head.
    public func forEachChainedEvent(
        from: UInt64 = 1, through: UInt64 = .max,
        _ body: (LedgerEvent, _ previousHash: [UInt8], _ hash: UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        let start = max(from, 1)
        guard var previous = try hash(at: start - 1) else { return }
        try forEachEvent(from: start, through: through) { event, hash in
            defer { previous = Array(hash) }
            return try body(event, previous, hash)
        }
    }

    /// Calls `body` with each event from `from` through `through` (inclusive) and its stored hash, in order,
    /// until `body` returns `false`.
    public func forEachEvent(
        from: UInt64 = 1, through: UInt64 = .max, _ body: (LedgerEvent, UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        try txn.withCursor(schema.log) { cursor in
            try cursor.forEach(from: max(from, 1)) { entry in
                let seq = entry.key.loadBigEndianUInt64()
                guard seq <= through else { return false }
                let parts = try HashChain.split(record: entry.value)
                return try body(try EventCodec.decode(parts.encodedEvent), parts.hash)
            }
        }
    }

    /// Calls `body` with each event and its encoded bytes (their first byte is the encoding version:
    /// ``EventCodec/isRedacted(_:)`` tells a record rewritten before the ledger sealed), in seq order, until `body`
    /// returns `false`.
    public func forEachEncodedEvent(_ body: (LedgerEvent, UnsafeRawBufferPointer) throws -> Bool) throws {
        try txn.withCursor(schema.log) { cursor in
            try cursor.forEach { entry in
                let parts = try HashChain.split(record: entry.value)
                return try body(try EventCodec.decode(parts.encodedEvent), parts.encodedEvent)
            }
        }
    }

    /// The stored hash of the event at `seq` (the genesis hash for seq 0).
    public func hash(at seq: UInt64) throws -> [UInt8]? {
        if seq == 0 { return HashChain.genesis }
        return try txn.withValue(in: schema.log, forKey: seq) { record in
            try record.map { Array(try HashChain.split(record: $0).hash) }
        }
    }

    /// The last seq whose time is at or before `time` (0 when every event is later).
    ///
    /// Binary search over the log: times never decrease with seq.
    public func seq(atOrBefore time: LedgerTime) throws -> UInt64 {
        var low: UInt64 = 0
        var high = try head().seq
        while low < high {
            let middle = low + (high - low + 1) / 2
            guard let event = try event(at: middle) else {
                throw StoreError(.corrupt, "the log has no event at seq \(middle)")
            }
            if event.time <= time { low = middle } else { high = middle - 1 }
        }
        return low
    }

    // MARK: Instances

    /// The instance id of `token`, whether registered now or only in the past.
    public func instanceID(of token: RegistrationToken) throws -> InstanceID? {
        try NameIndex.instanceID(of: token, txn: txn, schema: schema)
    }

    /// ``instanceID(of:)`` of each token (`nil` for a `nil` token), looked up in key order.
    public func instanceIDs(of tokens: [RegistrationToken?]) throws -> [InstanceID?] {
        try NameIndex.instanceIDs(of: tokens, txn: txn, schema: schema)
    }

    /// What the ledger knows of an instance now.
    public func instance(_ instance: InstanceID) throws -> InstanceInfo? {
        guard
            let record = try txn.withValue(in: schema.instances, forKey: instance, { try $0.map(InstanceRecord.init) })
        else { return nil }
        return InstanceInfo(
            id: instance, token: RegistrationToken(trusted: record.token),
            registeredSince: try LMDBProjection(txn: txn, schema: schema).registeredSince(instance),
            platform: record.platform.isEmpty ? nil : record.platform,
            appID: record.appID.isEmpty ? nil : record.appID)
    }

    /// The token of an instance id.
    public func token(of instance: InstanceID) throws -> RegistrationToken? {
        try txn.withValue(in: schema.instances, forKey: instance) { bytes in
            try bytes.map { RegistrationToken(trusted: try InstanceRecord.token(in: $0)) }
        }
    }

    /// Whether `instance` is registered in the state at `seq` (now, when `seq` is `nil`).
    public func isRegistered(_ instance: InstanceID, at seq: UInt64? = nil) throws -> Bool {
        if let since = try LMDBProjection(txn: txn, schema: schema).registeredSince(instance),
            since <= (seq ?? .max)
        {
            return true
        }
        guard let seq else { return false }
        return try txn.withCursor(schema.universeHistory) { cursor in
            var entry = try cursor.seek(universeKey, value: intervalValue(instance, start: 0, end: 0))
            while let value = entry?.value, StoredInterval(value).id == instance {
                if StoredInterval(value).holds(at: seq) { return true }
                entry = try cursor.nextDuplicate()
            }
            return false
        }
    }

    /// Instance ids run from 1 to this bound (exclusive): the capacity of an ``InstanceSet`` over them.
    public func instanceIDBound() throws -> Int { try txn.count(schema.instances) + 1 }

    /// The instances registered in the state at `seq` (now, when `nil`): the universe that `!` complements in.
    public func universe(at seq: UInt64? = nil) throws -> InstanceSet {
        var set = InstanceSet(capacity: try instanceIDBound())
        try fillHeld(current: schema.universe, history: schema.universeHistory, key: universeKey, at: seq, into: &set)
        return set
    }

    /// The instances registered in the state at `seq` (now, when `nil`), ascending.
    public func registeredInstances(at seq: UInt64? = nil) throws -> [InstanceID] {
        try universe(at: seq).ids
    }

    // MARK: Topics

    public func topicID(of topic: TopicName) throws -> TopicID? {
        try NameIndex.topicID(of: topic, txn: txn, schema: schema)
    }

    public func topicName(of topic: TopicID) throws -> TopicName? {
        try txn.withValue(in: schema.topicNames, forKey: topic) { bytes in
            bytes.map { TopicName(trusted: String(decoding: $0, as: UTF8.self)) }
        }
    }

    /// The topics of `instance` in the state at `seq` (now, when `nil`), ascending by id.
    public func topics(of instance: InstanceID, at seq: UInt64? = nil) throws -> [TopicID] {
        let capacity = try txn.count(schema.topicNames) + 1
        var set = InstanceSet(capacity: capacity)
        try fillHeld(
            current: schema.instanceTopics, history: schema.instanceTopicHistory, key: instance, at: seq,
            into: &set)
        let bound = seq ?? .max
        try RecentMemberships.forEachRecent(inPartitionOf: instance, txn: txn, schema: schema) { entry in
            guard entry.instance == instance, entry.since <= bound else { return }
            guard Int(entry.topic) < capacity else {
                throw StoreError(.corrupt, "topic id \(entry.topic) out of range")
            }
            set.insert(entry.topic)
        }
        return set.ids
    }

    /// The instance's current subscriptions with the seq each began at, ascending by topic id.
    public func subscriptions(of instance: InstanceID) throws -> [(topic: TopicID, since: UInt64)] {
        var result: [(topic: TopicID, since: UInt64)] = []
        try RecentMemberships.forEachMembership(of: instance, txn: txn, schema: schema) { topic, since in
            result.append((topic, since))
        }
        return result.sorted { $0.topic < $1.topic }
    }

    /// The members of `topic` in the state at `seq` (now, when `nil`), ascending by instance id.
    ///
    /// Costs O(the topic's own history), never O(the log).
    public func members(of topic: TopicID, at seq: UInt64? = nil) throws -> [InstanceID] {
        try memberSet(of: topic, at: seq, capacity: try instanceIDBound()).ids
    }

    /// The members of `topic` in the state at `seq` (now, when `nil`) as a set of `capacity`.
    public func memberSet(of topic: TopicID, at seq: UInt64? = nil, capacity: Int) throws -> InstanceSet {
        var set = InstanceSet(capacity: capacity)
        try fillHeld(
            current: schema.topicMembers, history: schema.topicMemberHistory, key: topic, at: seq, into: &set)
        return set
    }

    /// The number of instances subscribed to `topic` now. O(1).
    public func subscriberCount(of topic: TopicID) throws -> Int {
        try txn.withCursor(schema.topicMembers) { cursor in
            try cursor.find(topic) == nil ? 0 : try cursor.duplicateCount()
        }
    }

    /// Every topic ever subscribed to, with its current subscriber count, in `order`.
    public func topicsWithCounts(orderedBy order: TopicOrder) throws -> [TopicCount] {
        let topics = try topicsWithCounts()
        return order == .name ? topics : topics.sorted { order.precedes($0, $1) }
    }

    /// Every topic ever subscribed to, with its current subscriber count, by name.
    public func topicsWithCounts() throws -> [TopicCount] {
        var result: [TopicCount] = []
        try txn.withCursor(schema.topicNames) { cursor in
            try cursor.forEach { entry in
                let name = TopicName(trusted: String(decoding: entry.value, as: UTF8.self))
                result.append(
                    TopicCount(topic: name, subscribers: try subscriberCount(of: entry.key.loadBigEndianUInt32())))
                return true
            }
        }
        return result.sorted { $0.topic < $1.topic }
    }

    /// Sets the bit of each id held under `key` in the state at `seq` (now, when `nil`): current entries
    /// (`id ‖ since`) with `since ≤ seq`, plus closed intervals (`id ‖ start ‖ end`) with `start ≤ seq < end`.
    /// Reads a page of values per call and sets bits straight from LMDB's pages — the hot loop of every
    /// audience (a million-instance universe is a million of these). A pair holds at most one interval at
    /// a time, so no id is counted twice.
    private func fillHeld(
        current: LMDBDatabase, history: LMDBDatabase, key: UInt32, at seq: UInt64?, into set: inout InstanceSet
    ) throws {
        let bound = seq ?? .max
        try set.withUnsafeMutableWords { words in
            try txn.withCursor(current) { cursor in
                try cursor.forEachValueChunk(of: key) { chunk in
                    for offset in stride(from: 0, to: chunk.count, by: StoredMembership.size) {
                        let membership = StoredMembership(chunk, at: offset)
                        guard membership.since <= bound else { continue }
                        let id = membership.id
                        guard Int(id >> 6) < words.count else {
                            throw StoreError(.corrupt, "instance id \(id) out of range")
                        }
                        words[Int(id >> 6)] |= 1 << UInt64(id & 63)
                    }
                    return true
                }
            }
            guard let seq else { return }
            try txn.withCursor(history) { cursor in
                try cursor.forEachValueChunk(of: key) { chunk in
                    for offset in stride(from: 0, to: chunk.count, by: StoredInterval.size) {
                        let interval = StoredInterval(chunk, at: offset)
                        guard interval.holds(at: seq) else { continue }
                        let id = interval.id
                        guard Int(id >> 6) < words.count else {
                            throw StoreError(.corrupt, "instance id \(id) out of range")
                        }
                        words[Int(id >> 6)] |= 1 << UInt64(id & 63)
                    }
                    return true
                }
            }
        }
    }

    // MARK: Messages

    /// The seq of message `messageID`'s `sent` event and of its `audience` event, if recorded.
    public func message(_ messageID: UInt64) throws -> (sendSeq: UInt64, audienceSeq: UInt64?)? {
        try txn.withValue(in: schema.messages, forKey: messageID) { bytes in
            bytes.map { bytes in
                let state = MessageState(bytes)
                return (state.sendSeq, state.audienceSeq == 0 ? nil : state.audienceSeq)
            }
        }
    }

    // MARK: Statistics

    /// Counts for `ledger stats`.
    public func statistics() throws -> LedgerStatistics {
        let head = try head()
        return LedgerStatistics(
            events: head.seq, headTime: head.seq == 0 ? nil : head.time, headHash: head.hash.hexString,
            instances: try txn.count(schema.instances), registeredInstances: try txn.count(schema.universe),
            topics: try txn.count(schema.topicNames),
            subscriptions: try txn.count(schema.instanceTopics) + txn.count(schema.recentMemberships),
            messages: try txn.count(schema.messages), usedBytes: txn.environment.usedBytes,
            mapBytes: txn.environment.mapSize)
    }

    /// On a cluster's node that committed ahead of etcd: the seq through which etcd held the log when it last
    /// did (``MetaKey/clusterHeld``) — what follows may be an unacknowledged suffix (``Ledger/rollBack(after:)``).
    public func clusterHeld() throws -> UInt64? {
        try txn.withValue(in: schema.meta, forKey: MetaKey.clusterHeld) { $0?.loadBigEndianUInt64() }
    }

    package func rebuildingThrough() throws -> UInt64? {
        try txn.withValue(in: schema.meta, forKey: MetaKey.rebuildingThrough) { $0?.loadBigEndianUInt64() }
    }

    /// - Throws: `.rebuildRequired` while a rebuild or bulk import is writing the projections, or after one
    ///   stopped.
    package func requireCompleteProjections() throws {
        if let through = try rebuildingThrough() {
            throw StoreError(
                .rebuildRequired,
                "projections are being rebuilt or bulk-imported (done through seq \(through)), or that was"
                    + " interrupted; run `ledger rebuild`")
        }
    }
}

/// What the ledger knows of an instance.
public struct InstanceInfo: Sendable, Equatable {
    public var id: InstanceID
    public var token: RegistrationToken
    /// The seq of the registration in force, or `nil` when not registered now.
    public var registeredSince: UInt64?
    public var platform: String?
    public var appID: String?
}

/// Sizes of a ledger.
public struct LedgerStatistics: Sendable, Equatable {
    public var events: UInt64
    public var headTime: LedgerTime?
    public var headHash: String
    public var instances: Int
    public var registeredInstances: Int
    public var topics: Int
    public var subscriptions: Int
    public var messages: Int
    public var usedBytes: Int
    public var mapBytes: Int
}

/// A topic and its subscriber count now (`ledger topics`, `GET /v1/projects/{p}/topics`).
public struct TopicCount: Sendable, Equatable {
    public var topic: TopicName
    public var subscribers: Int

    public init(topic: TopicName, subscribers: Int) {
        self.topic = topic
        self.subscribers = subscribers
    }
}

extension TopicOrder {
    /// The page of `topics` (sorted in this order) that follows `last`, up to `size` long: the first topic after
    /// `last` found by binary search, so pages stay in order while counts change between calls.
    public func page(of topics: [TopicCount], after last: TopicCount?, size: Int) -> ArraySlice<TopicCount> {
        var start = 0
        if let last {
            var high = topics.count
            while start < high {
                let middle = (start + high) / 2
                if precedes(last, topics[middle]) { high = middle } else { start = middle + 1 }
            }
        }
        return topics[start..<min(topics.count, start + max(size, 0))]
    }
}

/// How topics are listed.
public enum TopicOrder: String, Sendable, CaseIterable {
    /// By name, in byte order.
    case name
    /// Most subscribers first; equal counts by name.
    case subscribers

    /// Whether `a` comes before `b` in this order (a total order: names are unique).
    public func precedes(_ a: TopicCount, _ b: TopicCount) -> Bool {
        switch self {
        case .name: a.topic < b.topic
        case .subscribers: a.subscribers != b.subscribers ? a.subscribers > b.subscribers : a.topic < b.topic
        }
    }
}
