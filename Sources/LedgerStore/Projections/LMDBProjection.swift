import LMDBKit
import LedgerCore

/// The ledger's projections in LMDB, written by ``EventFold`` inside one write transaction.
///
/// Besides current state it maintains the temporal index: when a membership or registration ends, its
/// `[start, end)` seq interval moves to a history database, so state at any seq is answered from the
/// instance's or topic's own entries.
struct LMDBProjection: LedgerProjection {
    let txn: LMDBTransaction
    let schema: LedgerSchema

    init(txn: LMDBTransaction, schema: LedgerSchema) {
        self.txn = txn
        self.schema = schema
    }

    func instanceID(for token: RegistrationToken) throws -> InstanceID? {
        try NameIndex.instanceID(of: token, txn: txn, schema: schema)
    }

    func createInstance(for token: RegistrationToken) throws -> InstanceID {
        let id = InstanceID(try txn.count(schema.instances) + 1)
        guard try txn.put(schema.tokens, key: NameKey(token.rawValue), value: id, flags: .noOverwrite) else {
            throw StoreError(.corrupt, "the key of a new registration token is taken")
        }
        let record = InstanceRecord(token: token.rawValue, platform: "", appID: "")
        try txn.put(schema.instances, key: id, value: record.encoded, flags: .append)
        return id
    }

    func isRegistered(_ instance: InstanceID) throws -> Bool {
        try registeredSince(instance) != nil
    }

    /// The seq of the registration in force, or `nil`.
    func registeredSince(_ instance: InstanceID) throws -> UInt64? {
        guard let entry = try txn.cursor(schema.universe).seek(universeKey, value: membershipValue(instance, since: 0)),
            StoredMembership(entry.value).id == instance
        else { return nil }
        return StoredMembership(entry.value).since
    }

    func record(of instance: InstanceID) throws -> InstanceRecord {
        guard
            let record = try txn.withValue(in: schema.instances, forKey: instance, { try $0.map(InstanceRecord.init) })
        else { throw StoreError(.corrupt, "instance \(instance) has no record") }
        return record
    }

    func register(_ instance: InstanceID, platform: String?, appID: String?, at seq: UInt64) throws {
        var record = try record(of: instance)
        record.platform = platform ?? ""
        record.appID = appID ?? ""
        try txn.put(schema.instances, key: instance, value: record.encoded)
        try txn.put(schema.universe, key: universeKey, value: membershipValue(instance, since: seq))
    }

    func unregister(_ instance: InstanceID, at seq: UInt64) throws {
        guard let since = try registeredSince(instance) else { return }
        try txn.delete(schema.universe, key: universeKey, value: membershipValue(instance, since: since))
        try txn.put(schema.universeHistory, key: universeKey, value: intervalValue(instance, start: since, end: seq))
    }

    func topicID(for topic: TopicName, create: Bool) throws -> TopicID? {
        if let id = try NameIndex.topicID(of: topic, txn: txn, schema: schema) { return id }
        guard create else { return nil }
        let id = TopicID(try txn.count(schema.topicNames) + 1)
        try txn.put(schema.topicIDs, key: NameKey(topic.rawValue), value: id)
        try txn.put(schema.topicNames, key: id, value: topic.rawValue, flags: .append)
        return id
    }

    /// The instance's current topics, ascending: from both of the instance side's databases.
    func topics(of instance: InstanceID) throws -> [TopicID] {
        var topics: [TopicID] = []
        try RecentMemberships.forEachMembership(of: instance, txn: txn, schema: schema) { topic, _ in
            topics.append(topic)
        }
        return topics.sorted()
    }

    /// The seq since which `instance` has held `topic`, or `nil`: asked of the topic's side
    /// (``memberSince(_:instance:)``), which holds the same memberships as the instance side.
    func subscribedSince(_ topic: TopicID, instance: InstanceID) throws -> UInt64? {
        try memberSince(topic, instance: instance)
    }

    /// The seq since which `instance` has held `topic`, or `nil`, asked of the topic's side (`topicMembers`):
    /// the same answer as ``subscribedSince(_:instance:)`` — the two sides always hold the same memberships
    /// (`verify` compares them) — from the pages a new membership of the topic is put on anyway, where the
    /// instance side's search reads a page of each instance that the writer does not otherwise touch
    /// (``RecentMemberships``).
    func memberSince(_ topic: TopicID, instance: InstanceID) throws -> UInt64? {
        guard let entry = try txn.cursor(schema.topicMembers).seek(topic, value: membershipValue(instance, since: 0)),
            StoredMembership(entry.value).id == instance
        else { return nil }
        return StoredMembership(entry.value).since
    }

    /// How many of the instance's topics are in `instanceTopics`: one B-tree search (the rest wait in
    /// `recentMemberships`; the writer keeps their count, ``WriterInstanceCache``).
    func settledTopicCount(of instance: InstanceID) throws -> Int {
        try txn.withCursor(schema.instanceTopics) { cursor in
            try cursor.find(instance) != nil ? cursor.duplicateCount() : 0
        }
    }

    func addTopic(_ topic: TopicID, to instance: InstanceID, at seq: UInt64) throws -> Bool {
        guard try subscribedSince(topic, instance: instance) == nil else { return false }
        try putMembership(topic, instance: instance, at: seq)
        return true
    }

    func removeTopic(_ topic: TopicID, from instance: InstanceID, at seq: UInt64) throws -> Bool {
        guard let since = try subscribedSince(topic, instance: instance) else { return false }
        try endMembership(topic, instance: instance, since: since, at: seq)
        return true
    }

    /// Stores a membership that begins at `seq`; the caller has checked there is none. The instance side goes
    /// to `recentMemberships` (``RecentMemberships``).
    func putMembership(_ topic: TopicID, instance: InstanceID, at seq: UInt64) throws {
        try RecentMemberships.add(topic, instance: instance, since: seq, txn: txn, schema: schema)
        try txn.put(schema.topicMembers, key: topic, value: membershipValue(instance, since: seq))
    }

    /// Moves the membership held since `since` to the history, ending at `seq`.
    ///
    /// - Returns: whether its instance side was in `recentMemberships` (rather than `instanceTopics`).
    @discardableResult
    func endMembership(_ topic: TopicID, instance: InstanceID, since: UInt64, at seq: UInt64) throws -> Bool {
        let wasRecent = try RecentMemberships.remove(topic, instance: instance, since: since, txn: txn, schema: schema)
        guard
            try wasRecent
                || txn.delete(schema.instanceTopics, key: instance, value: membershipValue(topic, since: since))
        else { throw StoreError(.corrupt, "instance \(instance) holds topic \(topic) on one side only") }
        try txn.delete(schema.topicMembers, key: topic, value: membershipValue(instance, since: since))
        try txn.put(schema.instanceTopicHistory, key: instance, value: intervalValue(topic, start: since, end: seq))
        try txn.put(schema.topicMemberHistory, key: topic, value: intervalValue(instance, start: since, end: seq))
        return wasRecent
    }

    func recordSend(messageID: UInt64, at seq: UInt64) throws {
        try txn.put(schema.messages, key: messageID, value: MessageState(sendSeq: seq, audienceSeq: 0).encoded)
        try txn.put(schema.sends, key: seq, value: messageID)
    }

    func messageState(_ messageID: UInt64) throws -> MessageState? {
        try txn.withValue(in: schema.messages, forKey: messageID) { $0.map(MessageState.init) }
    }

    /// The message id of the last entry of `sends`, or 0 when it is empty.
    func lastSentMessageID() throws -> UInt64 {
        try txn.withCursor(schema.sends) { cursor in
            guard let last = try cursor.last() else { return 0 }
            guard last.value.count == 8 else {
                throw StoreError(.corrupt, "sends entry has a \(last.value.count)-byte message id, expected 8")
            }
            return last.value.loadBigEndianUInt64()
        }
    }

    func recordAudience(messageID: UInt64, at seq: UInt64) throws {
        guard let sendSeq = try messageState(messageID)?.sendSeq else { return }
        try txn.put(schema.messages, key: messageID, value: MessageState(sendSeq: sendSeq, audienceSeq: seq).encoded)
    }

    func acknowledgedThrough(_ instance: InstanceID) throws -> UInt64 {
        try txn.withValue(in: schema.acknowledged, forKey: instance) { $0?.loadBigEndianUInt64() } ?? 0
    }

    func setAcknowledged(_ instance: InstanceID, through: UInt64) throws {
        try txn.put(schema.acknowledged, key: instance, value: through)
    }

    func apnsToken(of instance: InstanceID) throws -> APNsDeviceToken? {
        try APNsTokenRecord.current(of: instance, txn: txn, schema: schema)?.token
    }

    func setAPNsToken(_ token: APNsDeviceToken?, of instance: InstanceID, at seq: UInt64) throws {
        try APNsTokenRecord.set(token, of: instance, at: seq, txn: txn, schema: schema)
    }

    /// The platform the instance registered with (`nil`: none given).
    func platform(of instance: InstanceID) throws -> String? {
        let platform = try record(of: instance).platform
        return platform.isEmpty ? nil : platform
    }

    func recordPushProgress(sendSeq: UInt64, through: InstanceID, finished: Bool, expired: Bool, at seq: UInt64)
        throws
    {
        try txn.put(
            schema.pushProgress, key: PushRecords.key(sendSeq, seq),
            value: PushRecords.progressValue(through: through, finished: finished, expired: expired))
    }

    func recordPushFailure(sendSeq: UInt64, instance: InstanceID, failure: PushFailure, at seq: UInt64) throws {
        try txn.put(
            schema.pushFailures, key: PushRecords.failureKey(sendSeq, instance),
            value: PushRecords.failureValue(failure, at: seq))
    }

    func pushesSettledThrough() throws -> UInt64 {
        try PushRecords.settledThrough(txn: txn, schema: schema)
    }

    func settlePushes(through sendSeq: UInt64) throws {
        try txn.put(schema.pushProgress, key: PushRecords.settledKey, value: sendSeq)
    }

    func forgetAPNsTokens(of instance: InstanceID) throws {
        try APNsTokenRecord.forget(instance, txn: txn, schema: schema)
    }

    func liveActivityChannel(of topic: TopicName) throws -> LiveActivityChannel? {
        try LiveActivityChannelRecord.current(of: topic, txn: txn, schema: schema)
    }

    func setLiveActivityChannel(_ channel: LiveActivityChannel?, for topic: TopicName) throws {
        try LiveActivityChannelRecord.set(channel, for: topic, txn: txn, schema: schema)
    }

    func liveActivityToken(of instance: InstanceID, scope: LiveActivityScope) throws -> APNsDeviceToken? {
        try LiveActivityTokenRecord.current(of: instance, scope: scope, txn: txn, schema: schema)?.token
    }

    func setLiveActivityToken(
        _ token: APNsDeviceToken?, of instance: InstanceID, scope: LiveActivityScope, at seq: UInt64
    ) throws {
        try LiveActivityTokenRecord.set(token, of: instance, scope: scope, at: seq, txn: txn, schema: schema)
    }

    func liveActivityFollowers(of topic: TopicID) throws -> [InstanceID] {
        try LiveActivityTokenRecord.followers(of: topic, txn: txn, schema: schema)
    }

    func liveActivityScopes(of instance: InstanceID) throws -> [LiveActivityScope] {
        try LiveActivityTokenRecord.scopes(of: instance, txn: txn, schema: schema)
    }

    func forgetLiveActivityTokens(of instance: InstanceID) throws {
        try LiveActivityTokenRecord.forget(instance, txn: txn, schema: schema)
    }
}
