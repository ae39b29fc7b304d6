import LMDBKit
import LedgerCore

/// The projections built in memory by ``EventFold``, then written to empty databases in key order with
/// `MDB_APPEND` — what `rebuild` and `verify` use to fold a whole log quickly.
///
/// It must produce exactly the entries ``LMDBProjection`` produces incrementally; the property tests compare
/// the two byte for byte.
struct BulkProjection: LedgerProjection {
    private struct Membership {
        var topic: TopicID
        var since: UInt64
    }

    private struct Interval: Comparable {
        var id: UInt32
        var other: UInt32
        var start: UInt64
        var end: UInt64

        static func < (lhs: Self, rhs: Self) -> Bool {
            (lhs.id, lhs.other, lhs.start, lhs.end) < (rhs.id, rhs.other, rhs.start, rhs.end)
        }
    }

    private var tokens: [String: InstanceID] = [:]
    private var records: [InstanceRecord] = []
    /// Index `id - 1`: the seq of the registration in force, 0 when not registered.
    private var registeredSince: [UInt64] = []
    private var closedRegistrations: [Interval] = []
    private var topicIDs: [String: TopicID] = [:]
    private var topicNames: [String] = []
    /// Index `id - 1`: the instance's topics, in the order added.
    private var instanceTopics: [[Membership]] = []
    /// Closed memberships as (instance, topic, start, end).
    private var closedMemberships: [Interval] = []
    private var messages: [UInt64: (send: UInt64, audience: UInt64)] = [:]
    private var acknowledged: [InstanceID: UInt64] = [:]

    // MARK: LedgerProjection

    func instanceID(for token: RegistrationToken) -> InstanceID? { tokens[token.rawValue] }

    mutating func createInstance(for token: RegistrationToken) -> InstanceID {
        records.append(InstanceRecord(token: token.rawValue, platform: "", appID: ""))
        registeredSince.append(0)
        instanceTopics.append([])
        let id = InstanceID(records.count)
        tokens[token.rawValue] = id
        return id
    }

    func isRegistered(_ instance: InstanceID) -> Bool { registeredSince[Int(instance) - 1] != 0 }

    mutating func register(_ instance: InstanceID, platform: String?, appID: String?, at seq: UInt64) {
        records[Int(instance) - 1].platform = platform ?? ""
        records[Int(instance) - 1].appID = appID ?? ""
        registeredSince[Int(instance) - 1] = seq
    }

    mutating func unregister(_ instance: InstanceID, at seq: UInt64) {
        let since = registeredSince[Int(instance) - 1]
        guard since != 0 else { return }
        closedRegistrations.append(Interval(id: instance, other: 0, start: since, end: seq))
        registeredSince[Int(instance) - 1] = 0
    }

    mutating func topicID(for topic: TopicName, create: Bool) -> TopicID? {
        if let id = topicIDs[topic.rawValue] { return id }
        guard create else { return nil }
        topicNames.append(topic.rawValue)
        let id = TopicID(topicNames.count)
        topicIDs[topic.rawValue] = id
        return id
    }

    func topics(of instance: InstanceID) -> [TopicID] { instanceTopics[Int(instance) - 1].map(\.topic).sorted() }

    mutating func addTopic(_ topic: TopicID, to instance: InstanceID, at seq: UInt64) -> Bool {
        let index = Int(instance) - 1
        guard !instanceTopics[index].contains(where: { $0.topic == topic }) else { return false }
        instanceTopics[index].append(Membership(topic: topic, since: seq))
        return true
    }

    mutating func removeTopic(_ topic: TopicID, from instance: InstanceID, at seq: UInt64) -> Bool {
        let index = Int(instance) - 1
        guard let position = instanceTopics[index].firstIndex(where: { $0.topic == topic }) else { return false }
        let since = instanceTopics[index].remove(at: position).since
        closedMemberships.append(Interval(id: instance, other: topic, start: since, end: seq))
        return true
    }

    mutating func recordSend(messageID: UInt64, at seq: UInt64) { messages[messageID] = (seq, 0) }

    mutating func recordAudience(messageID: UInt64, at seq: UInt64) {
        guard let send = messages[messageID]?.send else { return }
        messages[messageID] = (send, seq)
    }

    func acknowledgedThrough(_ instance: InstanceID) -> UInt64 { acknowledged[instance] ?? 0 }

    mutating func setAcknowledged(_ instance: InstanceID, through: UInt64) { acknowledged[instance] = through }

    // MARK: Writing

    /// Writes every projection into the (empty) databases of `schema`, in transactions of bounded size.
    func write(to environment: LMDBEnvironment, schema: LedgerSchema) throws {
        var writer = AppendWriter(environment: environment)
        defer { writer.finish() }

        for (token, id) in tokens.sorted(by: { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }) {
            try writer.put(schema.tokens, key: token, value: id)
        }
        for (index, record) in records.enumerated() {
            try writer.put(schema.instances, key: UInt32(index + 1), value: record.encoded)
        }
        for (index, since) in registeredSince.enumerated() where since != 0 {
            try writer.put(schema.universe, key: universeKey, value: membershipValue(UInt32(index + 1), since: since))
        }
        for interval in closedRegistrations.sorted() {
            try writer.put(
                schema.universeHistory, key: universeKey,
                value: intervalValue(interval.id, start: interval.start, end: interval.end))
        }
        for (name, id) in topicIDs.sorted(by: { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }) {
            try writer.put(schema.topicIDs, key: name, value: id)
        }
        for (index, name) in topicNames.enumerated() {
            try writer.put(schema.topicNames, key: UInt32(index + 1), value: name)
        }
        // Per instance, then inverted per topic (visiting instances in order keeps each topic's list sorted).
        var topicMembers = [[(instance: InstanceID, since: UInt64)]](repeating: [], count: topicNames.count)
        for (index, memberships) in instanceTopics.enumerated() where !memberships.isEmpty {
            let instance = InstanceID(index + 1)
            for membership in memberships.sorted(by: { $0.topic < $1.topic }) {
                try writer.put(
                    schema.instanceTopics, key: instance,
                    value: membershipValue(membership.topic, since: membership.since))
                topicMembers[Int(membership.topic) - 1].append((instance, membership.since))
            }
        }
        for (index, members) in topicMembers.enumerated() {
            for member in members {
                try writer.put(
                    schema.topicMembers, key: UInt32(index + 1),
                    value: membershipValue(member.instance, since: member.since))
            }
        }
        for interval in closedMemberships.sorted() {
            try writer.put(
                schema.instanceTopicHistory, key: interval.id,
                value: intervalValue(interval.other, start: interval.start, end: interval.end))
        }
        let byTopic = closedMemberships.map { Interval(id: $0.other, other: $0.id, start: $0.start, end: $0.end) }
            .sorted()
        for interval in byTopic {
            try writer.put(
                schema.topicMemberHistory, key: interval.id,
                value: intervalValue(interval.other, start: interval.start, end: interval.end))
        }
        for (messageID, seqs) in messages.sorted(by: { $0.key < $1.key }) {
            var value = PackedBytes()
            value.append(seqs.send)
            value.append(seqs.audience)
            try writer.put(schema.messages, key: messageID, value: value)
        }
        for (messageID, seqs) in messages.sorted(by: { $0.value.send < $1.value.send }) {
            try writer.put(schema.sends, key: seqs.send, value: messageID)
        }
        for (instance, through) in acknowledged.sorted(by: { $0.key < $1.key }) {
            try writer.put(schema.acknowledged, key: instance, value: through)
        }
        try writer.commit()
    }
}

/// Appends sorted entries, committing every `batch` puts so no transaction grows past LMDB's dirty-page
/// limit. Entries must arrive in key order (and value order within a duplicate key).
///
/// Keys and values are copied into one growing byte buffer, not an array each: a rebuild writes millions.
private struct AppendWriter {
    let environment: LMDBEnvironment
    let batch = 250_000

    private struct Entry {
        var database: LMDBDatabase
        var start: Int
        var keyCount: Int
        var valueCount: Int
    }

    private var bytes: [UInt8] = []
    private var entries: [Entry] = []

    init(environment: LMDBEnvironment) { self.environment = environment }

    mutating func put(_ database: LMDBDatabase, key: some LMDBBytes, value: some LMDBBytes) throws {
        let start = bytes.count
        let keyCount = key.withLMDBBytes { buffer in
            bytes.append(contentsOf: buffer)
            return buffer.count
        }
        let valueCount = value.withLMDBBytes { buffer in
            bytes.append(contentsOf: buffer)
            return buffer.count
        }
        entries.append(Entry(database: database, start: start, keyCount: keyCount, valueCount: valueCount))
        if entries.count >= batch { try commit() }
    }

    mutating func commit() throws {
        guard !entries.isEmpty else { return }
        try bytes.withUnsafeBytes { buffer in
            try environment.write { txn in
                for entry in entries {
                    let valueStart = entry.start + entry.keyCount
                    try txn.put(
                        entry.database, key: UnsafeRawBufferPointer(rebasing: buffer[entry.start..<valueStart]),
                        value: UnsafeRawBufferPointer(rebasing: buffer[valueStart..<(valueStart + entry.valueCount)]),
                        flags: entry.database.allowsDuplicates ? .appendDuplicate : .append)
                }
            }
        }
        entries.removeAll(keepingCapacity: true)
        bytes.removeAll(keepingCapacity: true)
    }

    mutating func finish() {
        entries.removeAll()
        bytes.removeAll()
    }
}
