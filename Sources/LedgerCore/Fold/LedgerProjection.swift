/// Dense id of an app instance, assigned in log order from 1 when its token is first registered.
public typealias InstanceID = UInt32
/// Dense id of a topic, assigned in log order from 1 when it is first subscribed to.
public typealias TopicID = UInt32

/// The state an event fold reads and writes: what ``EventFold`` needs to know and change.
///
/// Implemented in memory (``InMemoryLedgerState``) and over LMDB (the store's projections), so the live
/// server, `rebuild`, `verify` and naive replay all share one definition of what an event does.
/// Every change carries the seq of the event causing it, for the temporal index.
public protocol LedgerProjection {
    /// The instance registered (now or ever) under `token`.
    mutating func instanceID(for token: RegistrationToken) throws -> InstanceID?
    /// Assigns the next instance id to a token seen for the first time.
    mutating func createInstance(for token: RegistrationToken) throws -> InstanceID
    mutating func isRegistered(_ instance: InstanceID) throws -> Bool
    /// The instance joins the universe at `seq`.
    mutating func register(_ instance: InstanceID, platform: String?, appID: String?, at seq: UInt64) throws
    /// The instance leaves the universe at `seq` (its topics were already removed).
    mutating func unregister(_ instance: InstanceID, at seq: UInt64) throws

    /// The topic's id, assigning the next one when `create` is true and the topic is new.
    mutating func topicID(for topic: TopicName, create: Bool) throws -> TopicID?
    /// The instance's current topics.
    mutating func topics(of instance: InstanceID) throws -> [TopicID]
    /// Adds the topic to the instance's set at `seq`; returns `false` if it was there (a no-op).
    mutating func addTopic(_ topic: TopicID, to instance: InstanceID, at seq: UInt64) throws -> Bool
    /// Removes the topic from the instance's set at `seq`; returns `false` if it was absent (a no-op).
    mutating func removeTopic(_ topic: TopicID, from instance: InstanceID, at seq: UInt64) throws -> Bool

    /// Records that message `messageID` was sent by the event at `seq`.
    mutating func recordSend(messageID: UInt64, at seq: UInt64) throws
    /// Records that the audience of message `messageID` was recorded by the event at `seq`.
    mutating func recordAudience(messageID: UInt64, at seq: UInt64) throws

    /// The instance's delivery cursor: every message sent at or before it is acknowledged (0: none).
    mutating func acknowledgedThrough(_ instance: InstanceID) throws -> UInt64
    /// Moves the instance's delivery cursor to `through` (the fold only ever moves it forward).
    mutating func setAcknowledged(_ instance: InstanceID, through: UInt64) throws

    /// The instance's APNs device token now, if it has one.
    mutating func apnsToken(of instance: InstanceID) throws -> APNsDeviceToken?
    /// Sets, replaces (`token`) or clears (`nil`) the instance's APNs device token at `seq`; the one it had is
    /// kept in its history, held until `seq`.
    mutating func setAPNsToken(_ token: APNsDeviceToken?, of instance: InstanceID, at seq: UInt64) throws

    /// The APNs pushes of the send at `sendSeq` have reached `through` (0: no recipient yet), as the event at
    /// `seq` records.
    mutating func recordPushProgress(
        sendSeq: UInt64, through: InstanceID, finished: Bool, expired: Bool, at seq: UInt64)
        throws
    /// The push of the send at `sendSeq` to `instance` failed for good, as the event at `seq` records.
    mutating func recordPushFailure(sendSeq: UInt64, instance: InstanceID, failure: PushFailure, at seq: UInt64) throws
    /// Every send at or before this seq has finished its pushes (0: none recorded).
    mutating func pushesSettledThrough() throws -> UInt64
    /// Moves ``pushesSettledThrough()`` to `sendSeq` (the fold only ever moves it forward).
    mutating func settlePushes(through sendSeq: UInt64) throws

    /// Forgets every APNs token the instance held, now or before (an erasure; it is no longer registered).
    /// Its id, its pseudonym (its token from now on), its topic history and its pushes stay.
    mutating func forgetAPNsTokens(of instance: InstanceID) throws

    /// The topic's broadcast channel now, if it has one.
    mutating func liveActivityChannel(of topic: TopicName) throws -> LiveActivityChannel?
    /// Gives the topic its broadcast channel (`channel`), replacing the one it had, or takes it away (`nil`).
    mutating func setLiveActivityChannel(_ channel: LiveActivityChannel?, for topic: TopicName) throws

    /// The ActivityKit token the instance holds for `scope` now, if any.
    mutating func liveActivityToken(of instance: InstanceID, scope: LiveActivityScope) throws -> APNsDeviceToken?
    /// Sets, replaces (`token`) or retires (`nil`) the instance's token for `scope` at `seq`; the one it had is kept
    /// in its history, held until `seq`.
    mutating func setLiveActivityToken(
        _ token: APNsDeviceToken?, of instance: InstanceID, scope: LiveActivityScope, at seq: UInt64) throws
    /// The instances that follow the topic's Live Activity now, in instance order.
    mutating func liveActivityFollowers(of topic: TopicID) throws -> [InstanceID]
    /// The scopes the instance holds a token for now.
    mutating func liveActivityScopes(of instance: InstanceID) throws -> [LiveActivityScope]
    /// Forgets every ActivityKit token the instance held, now or before (an erasure, after its registration ended).
    mutating func forgetLiveActivityTokens(of instance: InstanceID) throws
}

/// The one definition of what each event does to subscription state.
///
/// Events that make no sense for the current state (a subscription for an unknown or unregistered
/// instance) are no-ops: the store never appends them, and the fold stays total and deterministic.
public enum EventFold {
    /// Applies `event` to `state`.
    public static func apply<State: LedgerProjection>(_ event: LedgerEvent, to state: inout State) throws {
        let seq = event.seq
        switch event.body {
        case .registered(let token, let platform, let appID):
            let instance = try state.instanceID(for: token) ?? state.createInstance(for: token)
            if try !state.isRegistered(instance) {
                try state.register(instance, platform: platform, appID: appID, at: seq)
            }
        case .unregistered(let token, _):
            guard let instance = try state.instanceID(for: token), try state.isRegistered(instance) else { return }
            try end(instance, at: seq, in: &state)
        case .erased(let erasure):
            // Every earlier event naming the device names its pseudonym by now (live, the erasure renamed it
            // before appending this event; in a rebuild, the rewritten events did). The pseudonym keeps naming
            // the instance, for audits; an operation on it is refused like one on any unregistered token, and
            // registering it again is refused (``Erasure/isPseudonym(_:)``).
            guard let instance = try state.instanceID(for: erasure.pseudonym) else { return }
            if try state.isRegistered(instance) { try end(instance, at: seq, in: &state) }
            try state.forgetAPNsTokens(of: instance)
            try state.forgetLiveActivityTokens(of: instance)
        case .retention:
            // The rewrite of the forgotten contents is the writer's (or the follower's) before this event is
            // appended; the projections hold no content.
            return
        case .liveActivityChannelCreated(let change):
            try state.setLiveActivityChannel(
                LiveActivityChannel(
                    topic: change.topic, channelID: change.channelID,
                    messageStoragePolicy: change.messageStoragePolicy, createdSeq: seq),
                for: change.topic)
        case .liveActivityChannelDeleted(let change):
            // Only the channel it names: a deletion of a channel the topic no longer has changes nothing.
            guard try state.liveActivityChannel(of: change.topic)?.channelID == change.channelID else { return }
            try state.setLiveActivityChannel(nil, for: change.topic)
        case .liveActivityFollowed(let token, let topic, let pushToken):
            guard let instance = try state.instanceID(for: token), try state.isRegistered(instance),
                let topicID = try state.topicID(for: topic, create: true),
                try state.liveActivityToken(of: instance, scope: .topic(topicID)) != pushToken
            else { return }
            try state.setLiveActivityToken(pushToken, of: instance, scope: .topic(topicID), at: seq)
        case .liveActivityUnfollowed(let token, let topic, _):
            guard let instance = try state.instanceID(for: token), try state.isRegistered(instance),
                let topicID = try state.topicID(for: topic, create: false),
                try state.liveActivityToken(of: instance, scope: .topic(topicID)) != nil
            else { return }
            try state.setLiveActivityToken(nil, of: instance, scope: .topic(topicID), at: seq)
        case .pushToStartTokenSet(let token, let attributesType, let pushToken):
            let scope = LiveActivityScope.pushToStart(attributesType: attributesType)
            guard let instance = try state.instanceID(for: token), try state.isRegistered(instance),
                try state.liveActivityToken(of: instance, scope: scope) != pushToken
            else { return }
            try state.setLiveActivityToken(pushToken, of: instance, scope: scope, at: seq)
        case .liveActivitiesEnded(let topic, _, _):
            guard let topicID = try state.topicID(for: topic, create: false) else { return }
            for instance in try state.liveActivityFollowers(of: topicID) {
                try state.setLiveActivityToken(nil, of: instance, scope: .topic(topicID), at: seq)
            }
        case .subscribed(let token, let topic, _):
            guard let instance = try state.instanceID(for: token), try state.isRegistered(instance),
                let topicID = try state.topicID(for: topic, create: true)
            else { return }
            _ = try state.addTopic(topicID, to: instance, at: seq)
        case .unsubscribed(let token, let topic, _):
            guard let instance = try state.instanceID(for: token), try state.isRegistered(instance),
                let topicID = try state.topicID(for: topic, create: false)
            else { return }
            _ = try state.removeTopic(topicID, from: instance, at: seq)
        case .sent(let sent):
            try state.recordSend(messageID: sent.messageID, at: seq)
        case .audience(let audience):
            try state.recordAudience(messageID: audience.messageID, at: seq)
        case .acknowledged(let token, let through):
            guard let instance = try state.instanceID(for: token), try state.isRegistered(instance),
                through > (try state.acknowledgedThrough(instance))
            else { return }
            try state.setAcknowledged(instance, through: through)
        case .apnsTokenSet(let token, let apnsToken):
            guard let instance = try state.instanceID(for: token), try state.isRegistered(instance),
                try state.apnsToken(of: instance) != apnsToken
            else { return }
            try state.setAPNsToken(apnsToken, of: instance, at: seq)
        case .apnsTokenCleared(let token, _):
            guard let instance = try state.instanceID(for: token), try state.isRegistered(instance),
                try state.apnsToken(of: instance) != nil
            else { return }
            try state.setAPNsToken(nil, of: instance, at: seq)
        case .pushProgress(let progress):
            for failure in progress.failures {
                guard let instance = try state.instanceID(for: failure.token) else { continue }
                try state.recordPushFailure(sendSeq: progress.sendSeq, instance: instance, failure: failure, at: seq)
            }
            let through = try progress.throughToken.flatMap { try state.instanceID(for: $0) } ?? 0
            try state.recordPushProgress(
                sendSeq: progress.sendSeq, through: through, finished: progress.finished, expired: progress.expired,
                at: seq)
            if progress.settledThrough > (try state.pushesSettledThrough()) {
                try state.settlePushes(through: progress.settledThrough)
            }
        }
    }

    /// The registration of `instance` ends at `seq`: it leaves every topic, APNs, and the universe.
    private static func end<State: LedgerProjection>(_ instance: InstanceID, at seq: UInt64, in state: inout State)
        throws
    {
        for topic in try state.topics(of: instance) {
            _ = try state.removeTopic(topic, from: instance, at: seq)
        }
        // An instance that leaves the universe leaves APNs too: a later registration under the token sets its own.
        if try state.apnsToken(of: instance) != nil {
            try state.setAPNsToken(nil, of: instance, at: seq)
        }
        // And its Live Activities: the tokens it followed topics with, and its push-to-start tokens.
        for scope in try state.liveActivityScopes(of: instance) {
            try state.setLiveActivityToken(nil, of: instance, scope: scope, at: seq)
        }
        try state.unregister(instance, at: seq)
    }
}
