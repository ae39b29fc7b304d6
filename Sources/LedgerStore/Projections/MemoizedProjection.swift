import LMDBKit
import LedgerCore

/// ``LMDBProjection`` for one write transaction, remembering what it has looked up.
///
/// The appender checks an operation against the state (is the token registered, is it subscribed, how many
/// topics does it hold) and then ``EventFold`` asks the same questions again while applying the event; a
/// batch of 1,000 subscriptions to one topic asks for that topic 2,000 times. Each question is a B-tree
/// search with a `memcmp` per level, and in a write transaction every page it touches is also looked up
/// in the dirty-page list — the top of the writer's profile under batchAdd. Here topic ids are asked of LMDB once per transaction and kept; registrations and topic counts
/// once per writer, in ``WriterInstanceCache``, which outlive the transaction while nothing else writes; for
/// tokens and memberships only the last answer is kept, since the fold asks right after the check. Whether an instance holds a topic is asked of the topic's side
/// (``LMDBProjection/memberSince(_:instance:)``), whose pages a new membership is put on anyway; an
/// instance's topic count is its `instanceTopics` count plus its count in `recentMemberships`, which the
/// facts keep for every instance. Every write updates what is kept, so an answer is always what LMDB would
/// say now.
///
/// Lives no longer than its transaction: an aborted or retried transaction starts with an empty memo (and
/// ``WriterInstanceCache/begin(transaction:)`` forgets the facts of a transaction that did not commit).
struct MemoizedProjection: AppenderProjection {
    private let stored: LMDBProjection
    /// The last token asked about, with its instance or `nil` when it has none: the appender's check and the
    /// fold ask in turn. (A dictionary of every token of the transaction cost more than the LMDB searches it
    /// saved: hashing and probing 150-byte tokens was 6.7 % of the server's samples under batchAdd, the
    /// searches 1 %.)
    private var lastToken: (token: RegistrationToken, instance: InstanceID?)?
    /// Registrations and topic counts, kept across the writer's transactions.
    private let facts: WriterInstanceCache
    private var topicIDs: [TopicName: TopicID] = [:]
    /// The last topic asked about: a batch names one topic for all its tokens, and comparing its name costs
    /// less than hashing it for `topicIDs`.
    private var lastTopic: (name: TopicName, id: TopicID)?
    /// The last membership asked about: the appender's check and the fold's add or remove ask in turn.
    private var lastMembership: (instance: InstanceID, topic: TopicID, since: UInt64?)?

    /// - Parameter facts: the writer's, begun for `txn`.
    init(txn: LMDBTransaction, schema: LedgerSchema, facts: WriterInstanceCache) {
        stored = LMDBProjection(txn: txn, schema: schema)
        self.facts = facts
    }

    mutating func instanceID(for token: RegistrationToken) throws -> InstanceID? {
        if let last = lastToken, last.token == token { return last.instance }
        let found = try stored.instanceID(for: token)
        lastToken = (token, found)
        return found
    }

    /// Keeps `instance` as the last token's answer, so neither the appender's check nor the fold searches
    /// `tokens` for it.
    mutating func remember(_ token: RegistrationToken, isInstance instance: InstanceID) {
        lastToken = (token, instance)
    }

    mutating func createInstance(for token: RegistrationToken) throws -> InstanceID {
        let instance = try stored.createInstance(for: token)
        lastToken = (token, instance)
        facts.setRegistered(false, instance)
        facts.setTopicCount(0, of: instance)
        return instance
    }

    mutating func isRegistered(_ instance: InstanceID) throws -> Bool {
        if let known = facts.isRegistered(instance) { return known }
        let registered = try stored.isRegistered(instance)
        facts.setRegistered(registered, instance)
        return registered
    }

    mutating func register(_ instance: InstanceID, platform: String?, appID: String?, at seq: UInt64) throws {
        try stored.register(instance, platform: platform, appID: appID, at: seq)
        facts.setRegistered(true, instance)
    }

    mutating func unregister(_ instance: InstanceID, at seq: UInt64) throws {
        try stored.unregister(instance, at: seq)
        facts.setRegistered(false, instance)
    }

    mutating func topicID(for topic: TopicName, create: Bool) throws -> TopicID? {
        if let last = lastTopic, last.name == topic { return last.id }
        let id: TopicID?
        if let known = topicIDs[topic] {
            id = known
        } else {
            id = try stored.topicID(for: topic, create: create)
            if let id { topicIDs[topic] = id }
        }
        if let id { lastTopic = (topic, id) }
        return id
    }

    mutating func topics(of instance: InstanceID) throws -> [TopicID] {
        try stored.topics(of: instance)
    }

    mutating func subscribedSince(_ topic: TopicID, instance: InstanceID) throws -> UInt64? {
        if let last = lastMembership, last.instance == instance, last.topic == topic { return last.since }
        let since = try stored.memberSince(topic, instance: instance)
        lastMembership = (instance, topic, since)
        return since
    }

    mutating func topicCount(of instance: InstanceID) throws -> Int {
        if let known = facts.topicCount(of: instance) { return known }
        let count = try stored.settledTopicCount(of: instance) + recentCount(of: instance)
        facts.setTopicCount(count, of: instance)
        return count
    }

    /// How many of `instance`'s memberships wait in `recentMemberships`: from the facts, which load every
    /// instance's count the first time one is asked (a read of the whole of `recentMemberships`, once per
    /// writer while nothing else writes).
    private mutating func recentCount(of instance: InstanceID) throws -> Int {
        if let known = facts.recentCount(of: instance) { return known }
        let counts = try RecentMemberships.recentCounts(txn: stored.txn, schema: stored.schema)
        facts.loadRecentCounts(counts)
        return counts[instance] ?? 0
    }

    mutating func addTopic(_ topic: TopicID, to instance: InstanceID, at seq: UInt64) throws -> Bool {
        guard try subscribedSince(topic, instance: instance) == nil else { return false }
        try stored.putMembership(topic, instance: instance, at: seq)
        lastMembership = (instance, topic, seq)
        facts.recentChanged(instance, by: 1)
        if let count = facts.topicCount(of: instance) { facts.setTopicCount(count + 1, of: instance) }
        return true
    }

    mutating func removeTopic(_ topic: TopicID, from instance: InstanceID, at seq: UInt64) throws -> Bool {
        guard let since = try subscribedSince(topic, instance: instance) else { return false }
        if try stored.endMembership(topic, instance: instance, since: since, at: seq) {
            facts.recentChanged(instance, by: -1)
        }
        lastMembership = (instance, topic, nil)
        if let count = facts.topicCount(of: instance) { facts.setTopicCount(count - 1, of: instance) }
        return true
    }

    mutating func recordSend(messageID: UInt64, at seq: UInt64) throws {
        try stored.recordSend(messageID: messageID, at: seq)
    }

    func messageState(_ messageID: UInt64) throws -> MessageState? {
        try stored.messageState(messageID)
    }

    func lastSentMessageID() throws -> UInt64 {
        try stored.lastSentMessageID()
    }

    mutating func recordAudience(messageID: UInt64, at seq: UInt64) throws {
        try stored.recordAudience(messageID: messageID, at: seq)
    }

    mutating func acknowledgedThrough(_ instance: InstanceID) throws -> UInt64 {
        try stored.acknowledgedThrough(instance)
    }

    mutating func setAcknowledged(_ instance: InstanceID, through: UInt64) throws {
        try stored.setAcknowledged(instance, through: through)
    }

    mutating func apnsToken(of instance: InstanceID) throws -> APNsDeviceToken? {
        try stored.apnsToken(of: instance)
    }

    mutating func setAPNsToken(_ token: APNsDeviceToken?, of instance: InstanceID, at seq: UInt64) throws {
        try stored.setAPNsToken(token, of: instance, at: seq)
    }

    func platform(of instance: InstanceID) throws -> String? {
        try stored.platform(of: instance)
    }

    func recordPushProgress(sendSeq: UInt64, through: InstanceID, finished: Bool, expired: Bool, at seq: UInt64)
        throws
    {
        try stored.recordPushProgress(sendSeq: sendSeq, through: through, finished: finished, expired: expired, at: seq)
    }

    func recordPushFailure(sendSeq: UInt64, instance: InstanceID, failure: PushFailure, at seq: UInt64) throws {
        try stored.recordPushFailure(sendSeq: sendSeq, instance: instance, failure: failure, at: seq)
    }

    func pushesSettledThrough() throws -> UInt64 { try stored.pushesSettledThrough() }

    func settlePushes(through sendSeq: UInt64) throws { try stored.settlePushes(through: sendSeq) }

    func forgetAPNsTokens(of instance: InstanceID) throws { try stored.forgetAPNsTokens(of: instance) }

    func liveActivityChannel(of topic: TopicName) throws -> LiveActivityChannel? {
        try stored.liveActivityChannel(of: topic)
    }

    func setLiveActivityChannel(_ channel: LiveActivityChannel?, for topic: TopicName) throws {
        try stored.setLiveActivityChannel(channel, for: topic)
    }

    func liveActivityToken(of instance: InstanceID, scope: LiveActivityScope) throws -> APNsDeviceToken? {
        try stored.liveActivityToken(of: instance, scope: scope)
    }

    func setLiveActivityToken(
        _ token: APNsDeviceToken?, of instance: InstanceID, scope: LiveActivityScope, at seq: UInt64
    ) throws {
        try stored.setLiveActivityToken(token, of: instance, scope: scope, at: seq)
    }

    func liveActivityFollowers(of topic: TopicID) throws -> [InstanceID] { try stored.liveActivityFollowers(of: topic) }

    func liveActivityScopes(of instance: InstanceID) throws -> [LiveActivityScope] {
        try stored.liveActivityScopes(of: instance)
    }

    func forgetLiveActivityTokens(of instance: InstanceID) throws { try stored.forgetLiveActivityTokens(of: instance) }

    mutating func redact(_ targets: [ErasureTarget]) throws -> [Redaction] {
        lastToken = nil
        return try LogRedaction.redact(targets, txn: stored.txn, schema: stored.schema)
    }

    mutating func forgetContents(before cutoff: LedgerTime, limit: Int, reason: String) throws
        -> (range: ClosedRange<UInt64>, count: ContentRetention.Count)?
    {
        guard
            let range = try ContentRetention.nextRange(
                before: cutoff, limit: limit, txn: stored.txn, schema: stored.schema)
        else { return nil }
        return (range, try ContentRetention.forget(range, reason: reason, txn: stored.txn, schema: stored.schema))
    }
}
