/// Subscription state held in memory, folded with ``EventFold``.
///
/// The independent reference for tests, `replay --naive` and `verify`: it answers by the fold alone,
/// with no index.
public struct InMemoryLedgerState: LedgerProjection, Sendable {
    public private(set) var tokens: [RegistrationToken] = []
    private var instanceIDs: [RegistrationToken: InstanceID] = [:]
    public private(set) var registered: Set<InstanceID> = []
    public private(set) var topicNames: [TopicName] = []
    private var topicIDs: [TopicName: TopicID] = [:]
    private var instanceTopics: [InstanceID: Set<TopicID>] = [:]
    private var topicMembers: [TopicID: Set<InstanceID>] = [:]
    public private(set) var messages: [UInt64: UInt64] = [:]
    public private(set) var audiences: [UInt64: UInt64] = [:]
    /// Delivery cursors by instance (absent: 0).
    public private(set) var acknowledged: [InstanceID: UInt64] = [:]
    /// APNs device tokens by instance (absent: none).
    public private(set) var apnsTokens: [InstanceID: APNsDeviceToken] = [:]
    /// Each send's push progress, as its last `pushProgress` event left it.
    public private(set) var pushProgress: [UInt64: (through: InstanceID, finished: Bool, expired: Bool)] = [:]
    /// Each send's failed pushes, by instance.
    public private(set) var pushFailures: [UInt64: [InstanceID: PushFailure]] = [:]
    public private(set) var pushesSettled: UInt64 = 0
    /// Each topic's broadcast channel now.
    public private(set) var liveActivityChannels: [TopicName: LiveActivityChannel] = [:]
    /// The ActivityKit tokens each instance holds now (followed topics' activity tokens, push-to-start tokens).
    public private(set) var liveActivityTokens: [InstanceID: [LiveActivityScope: APNsDeviceToken]] = [:]
    /// The seq of the last event applied.
    public private(set) var seq: UInt64 = 0

    public init() {}

    /// Applies `event` with the shared fold.
    public mutating func apply(_ event: LedgerEvent) {
        // The in-memory implementation throws nothing.
        try! EventFold.apply(event, to: &self)
        seq = event.seq
    }

    // MARK: Queries

    public func isRegistered(_ token: RegistrationToken) -> Bool {
        instanceIDs[token].map { registered.contains($0) } ?? false
    }

    /// The instance's APNs device token now (`nil` for unknown or unregistered tokens, or none set).
    public func apnsToken(of token: RegistrationToken) -> APNsDeviceToken? {
        instanceIDs[token].flatMap { apnsTokens[$0] }
    }

    /// The instance's current topics (empty for unknown or unregistered tokens).
    public func topics(of token: RegistrationToken) -> Set<TopicName> {
        guard let instance = instanceIDs[token] else { return [] }
        return Set((instanceTopics[instance] ?? []).map { topicNames[Int($0) - 1] })
    }

    /// The tokens currently subscribed to `topic`.
    public func members(of topic: TopicName) -> Set<RegistrationToken> {
        guard let id = topicIDs[topic] else { return [] }
        return Set((topicMembers[id] ?? []).map { tokens[Int($0) - 1] })
    }

    /// The tokens currently registered (the universe).
    public var registeredTokens: Set<RegistrationToken> { Set(registered.map { tokens[Int($0) - 1] }) }

    // MARK: LedgerProjection

    public func instanceID(for token: RegistrationToken) -> InstanceID? { instanceIDs[token] }

    public mutating func createInstance(for token: RegistrationToken) -> InstanceID {
        tokens.append(token)
        let id = InstanceID(tokens.count)
        instanceIDs[token] = id
        return id
    }

    public func isRegistered(_ instance: InstanceID) -> Bool { registered.contains(instance) }

    public mutating func register(_ instance: InstanceID, platform: String?, appID: String?, at seq: UInt64) {
        registered.insert(instance)
    }

    public mutating func unregister(_ instance: InstanceID, at seq: UInt64) { registered.remove(instance) }

    public mutating func topicID(for topic: TopicName, create: Bool) -> TopicID? {
        if let id = topicIDs[topic] { return id }
        guard create else { return nil }
        topicNames.append(topic)
        let id = TopicID(topicNames.count)
        topicIDs[topic] = id
        return id
    }

    public func topics(of instance: InstanceID) -> [TopicID] { (instanceTopics[instance] ?? []).sorted() }

    public mutating func addTopic(_ topic: TopicID, to instance: InstanceID, at seq: UInt64) -> Bool {
        guard instanceTopics[instance, default: []].insert(topic).inserted else { return false }
        topicMembers[topic, default: []].insert(instance)
        return true
    }

    public mutating func removeTopic(_ topic: TopicID, from instance: InstanceID, at seq: UInt64) -> Bool {
        guard instanceTopics[instance]?.remove(topic) != nil else { return false }
        topicMembers[topic]?.remove(instance)
        return true
    }

    public mutating func recordSend(messageID: UInt64, at seq: UInt64) { messages[messageID] = seq }

    public mutating func recordAudience(messageID: UInt64, at seq: UInt64) { audiences[messageID] = seq }

    public func acknowledgedThrough(_ instance: InstanceID) -> UInt64 { acknowledged[instance] ?? 0 }

    public mutating func setAcknowledged(_ instance: InstanceID, through: UInt64) { acknowledged[instance] = through }

    public func apnsToken(of instance: InstanceID) -> APNsDeviceToken? { apnsTokens[instance] }

    public mutating func setAPNsToken(_ token: APNsDeviceToken?, of instance: InstanceID, at seq: UInt64) {
        apnsTokens[instance] = token
    }

    public mutating func recordPushProgress(
        sendSeq: UInt64, through: InstanceID, finished: Bool, expired: Bool, at seq: UInt64
    ) {
        pushProgress[sendSeq] = (through, finished, expired)
    }

    public mutating func recordPushFailure(sendSeq: UInt64, instance: InstanceID, failure: PushFailure, at seq: UInt64)
    {
        pushFailures[sendSeq, default: [:]][instance] = failure
    }

    public func pushesSettledThrough() -> UInt64 { pushesSettled }

    public mutating func forgetAPNsTokens(of instance: InstanceID) { apnsTokens[instance] = nil }

    public func liveActivityChannel(of topic: TopicName) -> LiveActivityChannel? { liveActivityChannels[topic] }

    public mutating func setLiveActivityChannel(_ channel: LiveActivityChannel?, for topic: TopicName) {
        liveActivityChannels[topic] = channel
    }

    public mutating func settlePushes(through sendSeq: UInt64) { pushesSettled = sendSeq }

    public func liveActivityToken(of instance: InstanceID, scope: LiveActivityScope) -> APNsDeviceToken? {
        liveActivityTokens[instance]?[scope]
    }

    public mutating func setLiveActivityToken(
        _ token: APNsDeviceToken?, of instance: InstanceID, scope: LiveActivityScope, at seq: UInt64
    ) {
        liveActivityTokens[instance, default: [:]][scope] = token
        if liveActivityTokens[instance]?.isEmpty == true { liveActivityTokens[instance] = nil }
    }

    public func liveActivityFollowers(of topic: TopicID) -> [InstanceID] {
        liveActivityTokens.compactMap { $0.value[.topic(topic)] == nil ? nil : $0.key }.sorted()
    }

    public func liveActivityScopes(of instance: InstanceID) -> [LiveActivityScope] {
        Array((liveActivityTokens[instance] ?? [:]).keys)
    }

    public mutating func forgetLiveActivityTokens(of instance: InstanceID) { liveActivityTokens[instance] = nil }

    /// The activity token the instance follows `topic`'s Live Activity with now (`nil` for unknown tokens or
    /// topics, or none).
    public func liveActivityToken(of token: RegistrationToken, topic: TopicName) -> APNsDeviceToken? {
        guard let instance = instanceIDs[token], let id = topicIDs[topic] else { return nil }
        return liveActivityTokens[instance]?[.topic(id)]
    }
}
