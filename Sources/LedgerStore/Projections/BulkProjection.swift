import LMDBKit
import LedgerCore

/// The projections built in memory by ``EventFold``, then written to empty databases in key order with
/// `MDB_APPEND` — what `rebuild` and `verify` use to fold a whole log quickly.
///
/// It must produce exactly the entries ``LMDBProjection`` produces incrementally; the property tests compare
/// the two byte for byte. A bulk import (``BulkImport``) also decides operations against it.
package struct BulkProjection: AppenderProjection {
    package init() {}

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
    private var lastSent: (seq: UInt64, messageID: UInt64) = (0, 0)
    private var acknowledged: [InstanceID: UInt64] = [:]
    /// The APNs token each instance holds now, with the seq it was set at.
    private var apnsTokens: [InstanceID: (since: UInt64, token: APNsDeviceToken)] = [:]
    private var liveActivityChannels: [TopicName: LiveActivityChannel] = [:]
    /// Tokens no longer held, as (instance, start, end, token).
    private var closedAPNsTokens: [(instance: InstanceID, start: UInt64, end: UInt64, token: APNsDeviceToken)] = []
    /// The ActivityKit tokens each instance holds now, by scope, with the seq each was set at.
    private var liveActivityTokens: [InstanceID: [LiveActivityScope: (since: UInt64, token: APNsDeviceToken)]] = [:]
    /// ActivityKit tokens no longer held, as their `liveActivityTokens` history entries (key, value).
    private var closedLiveActivityTokens: [InstanceID: [(key: [UInt8], value: [UInt8])]] = [:]
    /// Every push progress event, in log order, and the failures they recorded.
    private var pushProgress: [(key: [UInt8], value: [UInt8])] = []
    private var pushFailures: [[UInt8]: [UInt8]] = [:]
    private var pushesSettled: UInt64 = 0
    /// The last token and topic looked up or created, with their ids (which never change): a bulk import
    /// decides an operation and then folds its event, asking twice for each, with the same string — which
    /// `==` then answers from its storage's identity, without hashing or comparing bytes.
    private var lastToken: (name: String, id: InstanceID)?
    private var lastTopic: (name: String, id: TopicID)?
    /// The Merkle tree over the folded events, built on its own thread (nil: a tree of no events).
    package var tree: MerkleTreeWorker?

    // MARK: LedgerProjection

    package mutating func instanceID(for token: RegistrationToken) -> InstanceID? {
        if let last = lastToken, last.name == token.rawValue { return last.id }
        guard let id = tokens[token.rawValue] else { return nil }
        lastToken = (token.rawValue, id)
        return id
    }

    package mutating func createInstance(for token: RegistrationToken) -> InstanceID {
        records.append(InstanceRecord(token: token.rawValue, platform: "", appID: ""))
        registeredSince.append(0)
        instanceTopics.append([])
        let id = InstanceID(records.count)
        tokens[token.rawValue] = id
        lastToken = (token.rawValue, id)
        return id
    }

    package func isRegistered(_ instance: InstanceID) -> Bool { registeredSince[Int(instance) - 1] != 0 }

    package mutating func register(_ instance: InstanceID, platform: String?, appID: String?, at seq: UInt64) {
        records[Int(instance) - 1].platform = platform ?? ""
        records[Int(instance) - 1].appID = appID ?? ""
        registeredSince[Int(instance) - 1] = seq
    }

    package mutating func unregister(_ instance: InstanceID, at seq: UInt64) {
        let since = registeredSince[Int(instance) - 1]
        guard since != 0 else { return }
        closedRegistrations.append(Interval(id: instance, other: 0, start: since, end: seq))
        registeredSince[Int(instance) - 1] = 0
    }

    package mutating func topicID(for topic: TopicName, create: Bool) -> TopicID? {
        if let last = lastTopic, last.name == topic.rawValue { return last.id }
        if let id = topicIDs[topic.rawValue] {
            lastTopic = (topic.rawValue, id)
            return id
        }
        guard create else { return nil }
        topicNames.append(topic.rawValue)
        let id = TopicID(topicNames.count)
        topicIDs[topic.rawValue] = id
        lastTopic = (topic.rawValue, id)
        return id
    }

    package func topics(of instance: InstanceID) -> [TopicID] {
        instanceTopics[Int(instance) - 1].map(\.topic).sorted()
    }

    package mutating func addTopic(_ topic: TopicID, to instance: InstanceID, at seq: UInt64) -> Bool {
        let index = Int(instance) - 1
        guard !instanceTopics[index].contains(where: { $0.topic == topic }) else { return false }
        instanceTopics[index].append(Membership(topic: topic, since: seq))
        return true
    }

    package mutating func removeTopic(_ topic: TopicID, from instance: InstanceID, at seq: UInt64) -> Bool {
        let index = Int(instance) - 1
        guard let position = instanceTopics[index].firstIndex(where: { $0.topic == topic }) else { return false }
        let since = instanceTopics[index].remove(at: position).since
        closedMemberships.append(Interval(id: instance, other: topic, start: since, end: seq))
        return true
    }

    package mutating func recordSend(messageID: UInt64, at seq: UInt64) {
        messages[messageID] = (seq, 0)
        if seq > lastSent.seq { lastSent = (seq, messageID) }
    }

    package mutating func recordAudience(messageID: UInt64, at seq: UInt64) {
        guard let send = messages[messageID]?.send else { return }
        messages[messageID] = (send, seq)
    }

    package func acknowledgedThrough(_ instance: InstanceID) -> UInt64 { acknowledged[instance] ?? 0 }

    package mutating func setAcknowledged(_ instance: InstanceID, through: UInt64) { acknowledged[instance] = through }

    package func apnsToken(of instance: InstanceID) -> APNsDeviceToken? { apnsTokens[instance]?.token }

    package mutating func setAPNsToken(_ token: APNsDeviceToken?, of instance: InstanceID, at seq: UInt64) {
        if let held = apnsTokens[instance] {
            closedAPNsTokens.append((instance, held.since, seq, held.token))
        }
        apnsTokens[instance] = token.map { (seq, $0) }
    }

    package mutating func recordPushProgress(
        sendSeq: UInt64, through: InstanceID, finished: Bool, expired: Bool, at seq: UInt64
    ) {
        pushProgress.append(
            (
                PushRecords.key(sendSeq, seq),
                PushRecords.progressValue(through: through, finished: finished, expired: expired)
            ))
    }

    package mutating func recordPushFailure(sendSeq: UInt64, instance: InstanceID, failure: PushFailure, at seq: UInt64)
    {
        pushFailures[PushRecords.failureKey(sendSeq, instance)] = PushRecords.failureValue(failure, at: seq)
    }

    package func pushesSettledThrough() -> UInt64 { pushesSettled }

    package mutating func settlePushes(through sendSeq: UInt64) { pushesSettled = sendSeq }

    package func liveActivityChannel(of topic: TopicName) -> LiveActivityChannel? { liveActivityChannels[topic] }

    package mutating func setLiveActivityChannel(_ channel: LiveActivityChannel?, for topic: TopicName) {
        liveActivityChannels[topic] = channel
    }

    package mutating func forgetAPNsTokens(of instance: InstanceID) {
        apnsTokens[instance] = nil
        closedAPNsTokens.removeAll { $0.instance == instance }
    }

    package func liveActivityToken(of instance: InstanceID, scope: LiveActivityScope) -> APNsDeviceToken? {
        liveActivityTokens[instance]?[scope]?.token
    }

    package mutating func setLiveActivityToken(
        _ token: APNsDeviceToken?, of instance: InstanceID, scope: LiveActivityScope, at seq: UInt64
    ) {
        if let held = liveActivityTokens[instance]?[scope] {
            closedLiveActivityTokens[instance, default: []].append(
                (
                    LiveActivityTokenRecord.historyKey(instance, scope, start: held.since),
                    LiveActivityTokenRecord.value(held.token, seq: seq)
                ))
        }
        liveActivityTokens[instance, default: [:]][scope] = token.map { (seq, $0) }
        if liveActivityTokens[instance]?.isEmpty == true { liveActivityTokens[instance] = nil }
    }

    package func liveActivityFollowers(of topic: TopicID) -> [InstanceID] {
        liveActivityTokens.compactMap { $0.value[.topic(topic)] == nil ? nil : $0.key }.sorted()
    }

    package func liveActivityScopes(of instance: InstanceID) -> [LiveActivityScope] {
        Array((liveActivityTokens[instance] ?? [:]).keys)
    }

    package mutating func forgetLiveActivityTokens(of instance: InstanceID) {
        liveActivityTokens[instance] = nil
        closedLiveActivityTokens[instance] = nil
    }

    // MARK: AppenderProjection

    /// A bulk import's requests are not resolved before queueing, and its lookups are in memory anyway.
    package mutating func remember(_ token: RegistrationToken, isInstance instance: InstanceID) {}

    package func subscribedSince(_ topic: TopicID, instance: InstanceID) -> UInt64? {
        instanceTopics[Int(instance) - 1].first { $0.topic == topic }?.since
    }

    package func topicCount(of instance: InstanceID) -> Int { instanceTopics[Int(instance) - 1].count }

    package func platform(of instance: InstanceID) -> String? {
        let platform = records[Int(instance) - 1].platform
        return platform.isEmpty ? nil : platform
    }

    package func messageState(_ messageID: UInt64) -> MessageState? {
        messages[messageID].map { MessageState(sendSeq: $0.send, audienceSeq: $0.audience) }
    }

    package func lastSentMessageID() -> UInt64 { lastSent.messageID }

    /// An import appends history; it never rewrites it.
    package func redact(_ targets: [ErasureTarget]) throws -> [Redaction] {
        throw StoreError(.invalidArgument, "an import cannot erase devices; erase them after it (`ledger erase`)")
    }

    /// An import appends history; retention is a running ledger's sweep.
    package func forgetContents(before cutoff: LedgerTime, limit: Int, reason: String) throws
        -> (range: ClosedRange<UInt64>, count: ContentRetention.Count)?
    {
        throw StoreError(.invalidArgument, "an import cannot forget contents; a server's retention sweep does")
    }

    // MARK: Writing

    /// Writes every projection into the (empty) databases of `schema`, in transactions of bounded size.
    ///
    /// Duplicate databases get one run of values per key (``AppendWriter/putRun(_:key:_:)``): a key's
    /// members in one LMDB call instead of one call (and one tree descent) each.
    package func write(to environment: LMDBEnvironment, schema: LedgerSchema) throws {
        var writer = AppendWriter(environment: environment)
        defer { writer.finish() }
        var run = ValueRun()

        // In key order: hashed keys (long tokens) first, by hash, then every other token by its bytes.
        let byToken = records.indices.map { (key: NameKey(records[$0].token), index: $0) }
            .map { (key: $0.key.isHashed ? $0.key.bytes : nil, index: $0.index) }
            .sorted { left, right in
                switch (left.key, right.key) {
                case (let l?, let r?): return l.lexicographicallyPrecedes(r)
                case (.some, nil): return true
                case (nil, .some): return false
                case (nil, nil):
                    return RegistrationToken(trusted: records[left.index].token)
                        < RegistrationToken(trusted: records[right.index].token)
                }
            }
        for entry in byToken {
            try writer.put(schema.tokens, key: NameKey(records[entry.index].token), value: InstanceID(entry.index + 1))
        }
        for (index, record) in records.enumerated() {
            try writer.put(schema.instances, key: UInt32(index + 1), value: record.encoded)
        }
        for (index, since) in registeredSince.enumerated() where since != 0 {
            run.append(membershipValue(UInt32(index + 1), since: since))
        }
        try writer.putRun(schema.universe, key: universeKey, &run)
        for interval in closedRegistrations.sorted() {
            run.append(intervalValue(interval.id, start: interval.start, end: interval.end))
        }
        try writer.putRun(schema.universeHistory, key: universeKey, &run)
        for (key, id) in topicIDs.map({ (NameKey($0.key).bytes, $0.value) }).sorted(by: {
            $0.0.lexicographicallyPrecedes($1.0)
        }) {
            try writer.put(schema.topicIDs, key: key, value: id)
        }
        for (index, name) in topicNames.enumerated() {
            try writer.put(schema.topicNames, key: UInt32(index + 1), value: name)
        }
        // Per instance, then inverted per topic (visiting instances in order keeps each topic's list sorted).
        var topicMembers = [[(instance: InstanceID, since: UInt64)]](repeating: [], count: topicNames.count)
        for (index, memberships) in instanceTopics.enumerated() where !memberships.isEmpty {
            let instance = InstanceID(index + 1)
            for membership in memberships.sorted(by: { $0.topic < $1.topic }) {
                run.append(membershipValue(membership.topic, since: membership.since))
                topicMembers[Int(membership.topic) - 1].append((instance, membership.since))
            }
            try writer.putRun(schema.instanceTopics, key: instance, &run)
        }
        for (index, members) in topicMembers.enumerated() {
            for member in members { run.append(membershipValue(member.instance, since: member.since)) }
            try writer.putRun(schema.topicMembers, key: UInt32(index + 1), &run)
        }
        try writeRuns(closedMemberships.sorted(), to: schema.instanceTopicHistory, &writer, &run)
        let byTopic = closedMemberships.map { Interval(id: $0.other, other: $0.id, start: $0.start, end: $0.end) }
        try writeRuns(byTopic.sorted(), to: schema.topicMemberHistory, &writer, &run)
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
        for (instance, held) in apnsTokens.sorted(by: { $0.key < $1.key }) {
            try writer.put(schema.apnsTokens, key: instance, value: APNsTokenRecord.value(held.token, seq: held.since))
        }
        for (key, channel) in liveActivityChannels.map({ (NameKey($0.key.rawValue).bytes, $0.value) }).sorted(by: {
            $0.0.lexicographicallyPrecedes($1.0)
        }) {
            try writer.put(schema.liveActivityChannels, key: key, value: LiveActivityChannelRecord.value(channel))
        }
        var activityEntries = closedLiveActivityTokens.values.flatMap { $0 }
        for (instance, scopes) in liveActivityTokens {
            for (scope, held) in scopes {
                activityEntries.append(
                    (
                        LiveActivityTokenRecord.currentKey(instance, scope),
                        LiveActivityTokenRecord.value(held.token, seq: held.since)
                    ))
                activityEntries.append((LiveActivityTokenRecord.scopeKey(instance, scope), []))
            }
        }
        for (key, value) in activityEntries.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
            try writer.put(schema.liveActivityTokens, key: key, value: value)
        }
        for closed in closedAPNsTokens.sorted(by: { ($0.instance, $0.start) < ($1.instance, $1.start) }) {
            try writer.put(
                schema.apnsTokenHistory, key: APNsTokenRecord.historyKey(closed.instance, start: closed.start),
                value: APNsTokenRecord.value(closed.token, seq: closed.end))
        }
        var progress = pushProgress
        if pushesSettled > 0 {
            var settled = ByteWriter(capacity: 8)
            settled.append(pushesSettled)
            progress.append((PushRecords.settledKey, settled.bytes))
        }
        for (key, value) in progress.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
            try writer.put(schema.pushProgress, key: key, value: value)
        }
        for (key, value) in pushFailures.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
            try writer.put(schema.pushFailures, key: key, value: value)
        }
        // Last: the tree's thread may still be hashing while the projections above are written.
        let merkle = tree?.finish() ?? MerkleBuilder()
        try merkle.forEachStored { key, hash in try writer.put(schema.merkle, key: key, value: hash) }
        try writer.commit()
    }

    /// Writes sorted closed intervals as `other ‖ start ‖ end` values, one run per `id`.
    private func writeRuns(
        _ sorted: [Interval], to database: LMDBDatabase, _ writer: inout AppendWriter, _ run: inout ValueRun
    ) throws {
        var position = 0
        while position < sorted.count {
            let id = sorted[position].id
            while position < sorted.count && sorted[position].id == id {
                let interval = sorted[position]
                run.append(intervalValue(interval.other, start: interval.start, end: interval.end))
                position += 1
            }
            try writer.putRun(database, key: id, &run)
        }
    }
}

/// The values of one key of a duplicate database, laid end to end (all of one size).
private struct ValueRun {
    var bytes: [UInt8] = []
    var valueSize = 0

    mutating func append(_ value: PackedBytes) {
        value.withLMDBBytes { buffer in
            precondition(valueSize == 0 || buffer.count == valueSize, "the values of a run have one size")
            valueSize = buffer.count
            bytes.append(contentsOf: buffer)
        }
    }

    /// Empties the run (keeping its capacity) for the next key, of any value size.
    mutating func removeAll() {
        bytes.removeAll(keepingCapacity: true)
        valueSize = 0
    }
}

/// Appends sorted entries, committing once `batch` values are queued so no transaction grows past LMDB's
/// dirty-page limit. Entries must arrive in key order (and value order within a duplicate key).
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
        /// 0 for a single value; otherwise the size of each value of a run (`valueCount` is a multiple).
        var valueSize: Int
    }

    private var bytes: [UInt8] = []
    private var entries: [Entry] = []
    private var queuedValues = 0

    init(environment: LMDBEnvironment) { self.environment = environment }

    /// Queues one value under `key`.
    mutating func put(_ database: LMDBDatabase, key: some LMDBBytes, value: some LMDBBytes) throws {
        let valueCount = value.withLMDBBytes { buffer in buffer.count }
        try queue(database, key: key, valueCount: valueCount, valueSize: 0, values: 1) { bytes in
            value.withLMDBBytes { buffer in bytes.append(contentsOf: buffer) }
        }
    }

    /// Queues the values of `run` under `key` of a `.duplicateFixed` database and empties `run`; nothing
    /// when `run` is empty.
    mutating func putRun(_ database: LMDBDatabase, key: some LMDBBytes, _ run: inout ValueRun) throws {
        guard !run.bytes.isEmpty else { return }
        let values = run.bytes.count / run.valueSize
        try queue(database, key: key, valueCount: run.bytes.count, valueSize: run.valueSize, values: values) {
            $0.append(contentsOf: run.bytes)
        }
        run.removeAll()
    }

    private mutating func queue(
        _ database: LMDBDatabase, key: some LMDBBytes, valueCount: Int, valueSize: Int, values: Int,
        appendValue: (inout [UInt8]) -> Void
    ) throws {
        let start = bytes.count
        let keyCount = key.withLMDBBytes { buffer in
            bytes.append(contentsOf: buffer)
            return buffer.count
        }
        appendValue(&bytes)
        entries.append(
            Entry(database: database, start: start, keyCount: keyCount, valueCount: valueCount, valueSize: valueSize))
        queuedValues += values
        if queuedValues >= batch { try commit() }
    }

    mutating func commit() throws {
        guard !entries.isEmpty else { return }
        try bytes.withUnsafeBytes { buffer in
            try environment.write { txn in
                for entry in entries {
                    let valueStart = entry.start + entry.keyCount
                    let key = UnsafeRawBufferPointer(rebasing: buffer[entry.start..<valueStart])
                    let value = UnsafeRawBufferPointer(rebasing: buffer[valueStart..<(valueStart + entry.valueCount)])
                    if entry.valueSize > 0 {
                        try txn.cursor(entry.database).putDuplicates(
                            key, values: value, valueSize: entry.valueSize, flags: .appendDuplicate)
                    } else {
                        try txn.put(
                            entry.database, key: key, value: value,
                            flags: entry.database.allowsDuplicates ? .appendDuplicate : .append)
                    }
                }
            }
        }
        entries.removeAll(keepingCapacity: true)
        bytes.removeAll(keepingCapacity: true)
        queuedValues = 0
    }

    mutating func finish() {
        entries.removeAll()
        bytes.removeAll()
    }
}
