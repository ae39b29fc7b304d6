/// One immutable entry of the ledger's log.
///
/// `seq` is gapless per project from 1; `time` is UTC microseconds and never decreases with `seq`.
public struct LedgerEvent: Sendable, Equatable {
    public var seq: UInt64
    public var time: LedgerTime
    /// The credential that caused the event (`admin`, `client`, `device`, `import`, …).
    public var actor: String
    /// Shared by every event of one request.
    public var requestID: String
    public var body: Body
    /// How the body's sealed values are held, one ``Seal`` for each of ``Body/sealedValues`` in order; `nil` for
    /// an event written before the ledger sealed its fields (encoding version 1 or 2), whose hash is over the
    /// plain values. Not part of what happened: two events that differ only in their seals are equal.
    public var seals: [Seal]?

    public init(
        seq: UInt64, time: LedgerTime, actor: String, requestID: String, body: Body, seals: [Seal]? = nil
    ) {
        self.seq = seq
        self.time = time
        self.actor = actor
        self.requestID = requestID
        self.body = body
        self.seals = seals
    }

    /// What happened, compared: the seals (how the values are held) are left out.
    public static func == (left: LedgerEvent, right: LedgerEvent) -> Bool {
        left.seq == right.seq && left.time == right.time && left.actor == right.actor
            && left.requestID == right.requestID && left.body == right.body
    }

    /// What happened.
    public enum Body: Sendable, Equatable {
        /// The instance exists; it joins the universe that `!` complements against.
        case registered(token: RegistrationToken, platform: String?, appID: String?)
        /// The instance leaves the universe and every topic.
        case unregistered(token: RegistrationToken, reason: String)
        /// The topic joins the instance's set (no-op if present).
        case subscribed(token: RegistrationToken, topic: TopicName, via: SubscriptionChannel)
        /// The topic leaves the instance's set (no-op if absent).
        case unsubscribed(token: RegistrationToken, topic: TopicName, via: SubscriptionChannel)
        /// A message was accepted for sending.
        case sent(SentMessage)
        /// The audience of a send, recorded once computed.
        case audience(AudienceRecord)
        /// The device acknowledged every message sent at or before seq `through` (its delivery cursor).
        case acknowledged(token: RegistrationToken, through: UInt64)
        /// The instance's APNs device token is set or replaced: sends reach it through APNs from here on.
        case apnsTokenSet(token: RegistrationToken, apnsToken: APNsDeviceToken)
        /// The instance's APNs device token is cleared: by the device, by the server, or by APNs' answer
        /// (`reason`).
        case apnsTokenCleared(token: RegistrationToken, reason: String)
        /// The APNs pushes of a send got this far (``PushProgress``).
        case pushProgress(PushProgress)
        /// The registration's identifiers were erased: every earlier event naming its registration token or one
        /// of its APNs tokens now names ``Erasure/pseudonym`` instead, and the registration ends here.
        case erased(Erasure)
        /// The project's `contentRetention` forgot the contents of the sends among seqs
        /// ``RetentionSweep/firstSeq`` through ``RetentionSweep/throughSeq``: their records are rewritten, keeping
        /// their hashes.
        case retention(RetentionSweep)
        /// Apple created an iOS 18 broadcast channel for a topic: its Live Activity sends are one broadcast on it.
        case liveActivityChannelCreated(LiveActivityChannelChange)
        /// The topic's broadcast channel was deleted at Apple: the topic has none from here on.
        case liveActivityChannelDeleted(LiveActivityChannelChange)
        /// The instance follows the topic's Live Activity with the activity's push token (replacing the one it
        /// followed it with): the topic's `liveactivity` updates and ends reach it.
        case liveActivityFollowed(token: RegistrationToken, topic: TopicName, pushToken: APNsDeviceToken)
        /// The instance no longer follows the topic's Live Activity (`reason`: who ended it).
        case liveActivityUnfollowed(token: RegistrationToken, topic: TopicName, reason: String)
        /// The instance's ActivityKit push-to-start token for an attributes type is set or replaced: the topics'
        /// `liveactivity` starts of that type reach it.
        case pushToStartTokenSet(token: RegistrationToken, attributesType: String, pushToken: APNsDeviceToken)
        /// The send at `sendSeq` ended the topic's Live Activity: every follower's activity token is retired.
        case liveActivitiesEnded(topic: TopicName, sendSeq: UInt64, messageID: UInt64)
    }

    /// The event's kind, as named in the log export and the documentation.
    public var kind: Kind {
        switch body {
        case .registered: .registered
        case .unregistered: .unregistered
        case .subscribed: .subscribed
        case .unsubscribed: .unsubscribed
        case .sent: .sent
        case .audience: .audience
        case .acknowledged: .acknowledged
        case .apnsTokenSet: .apnsTokenSet
        case .apnsTokenCleared: .apnsTokenCleared
        case .pushProgress: .pushProgress
        case .erased: .erased
        case .retention: .retention
        case .liveActivityChannelCreated: .liveActivityChannelCreated
        case .liveActivityChannelDeleted: .liveActivityChannelDeleted
        case .liveActivityFollowed: .liveActivityFollowed
        case .liveActivityUnfollowed: .liveActivityUnfollowed
        case .pushToStartTokenSet: .pushToStartTokenSet
        case .liveActivitiesEnded: .liveActivitiesEnded
        }
    }

    public enum Kind: String, Sendable, CaseIterable {
        case registered, unregistered, subscribed, unsubscribed, sent, audience, acknowledged, apnsTokenSet
        case apnsTokenCleared, pushProgress, erased, retention, liveActivityChannelCreated, liveActivityChannelDeleted
        case liveActivityFollowed, liveActivityUnfollowed, pushToStartTokenSet, liveActivitiesEnded
    }
}

/// Which API changed a subscription.
public enum SubscriptionChannel: String, Sendable, CaseIterable {
    /// The device itself (client API).
    case client
    /// FCM HTTP v1 topic management.
    case v1
    /// Legacy Instance ID (`iid/v1:batchAdd`, `batchRemove`, `rel/topics`).
    case iid
}

/// The target of a send: exactly one of a topic, a condition, or a token.
public enum MessageTarget: Sendable, Equatable {
    case topic(TopicName)
    /// The condition text as accepted; parsed with the send's precedence rule.
    case condition(String)
    case token(RegistrationToken)

    /// `topic`, `condition` or `token`.
    public var kindName: String {
        switch self {
        case .topic: "topic"
        case .condition: "condition"
        case .token: "token"
        }
    }

    /// The topic name, condition text or token.
    public var text: String {
        switch self {
        case .topic(let topic): topic.rawValue
        case .condition(let condition): condition
        case .token(let token): token.rawValue
        }
    }
}

/// How `&&` and `||` group when a condition does not say.
public enum ConditionPrecedence: String, Sendable, CaseIterable {
    /// FCM's documented rule: parenthesized groups first, then strictly left to right.
    case leftToRight = "left-to-right"
    /// `&&` binds tighter than `||`.
    case standard
}

/// A message accepted for sending, as stored in a `sent` event.
public struct SentMessage: Sendable, Equatable {
    /// Decimal 63-bit id, unique per project.
    public var messageID: UInt64
    public var target: MessageTarget
    /// The rule the condition was (and on replay always is) evaluated with.
    public var precedence: ConditionPrecedence
    /// The message object as accepted, UTF-8 JSON.
    public var messageJSON: [UInt8]
    /// The iOS 18 broadcast channel the send goes out on (a topic's Live Activity `update` or `end` in a project that
    /// broadcasts, whose topic had this channel at the send); `nil` for every other send, which is pushed to each
    /// recipient. Decided by the writer with the send, and never again.
    public var broadcastChannelID: String?
    /// Where a topic's Live Activity send (`apns-push-type: liveactivity`) goes, recorded with it (layout 13) so that
    /// it outlives the content: an erasure or `contentRetention` forgets the message, not where its pushes went.
    /// `nil` for every other send, and for one recorded before layout 13.
    public var topicActivity: TopicActivityDelivery?

    public init(
        messageID: UInt64, target: MessageTarget, precedence: ConditionPrecedence, messageJSON: [UInt8],
        broadcastChannelID: String? = nil, topicActivity: TopicActivityDelivery? = nil
    ) {
        self.messageID = messageID
        self.target = target
        self.precedence = precedence
        self.messageJSON = messageJSON
        self.broadcastChannelID = broadcastChannelID
        self.topicActivity = topicActivity
    }
}

/// Where a topic's Live Activity send goes (`Sent.topic_activity`, `Sent.attributes_type`): decided from the message
/// when it is sent, and kept in the clear (an ActivityAttributes type's name is the app's, not a person's).
public enum TopicActivityDelivery: Sendable, Equatable {
    /// An `update` or `end`: to each member's activity token for the topic (or, with a broadcast channel recorded,
    /// one broadcast on it).
    case followers
    /// A `start`: to each member's push-to-start token for the ActivityAttributes type.
    case pushToStart(attributesType: String)
    /// Nowhere: a message without an ActivityKit event, or a start without a valid type (`ledger import` does not
    /// validate).
    case nowhere

    /// Its name in `ledger log`: `followers`, `pushToStart`, `nowhere`.
    public var name: String {
        switch self {
        case .followers: "followers"
        case .pushToStart: "pushToStart"
        case .nowhere: "nowhere"
        }
    }

    /// As `Sent.topic_activity` holds it: 1 followers, 2 push-to-start, 3 nowhere (0: not recorded).
    public var wireValue: UInt32 {
        switch self {
        case .followers: 1
        case .pushToStart: 2
        case .nowhere: 3
        }
    }

    /// From `Sent.topic_activity` and `Sent.attributes_type`: `nil` for 0; throws for any other value, or a
    /// push-to-start without a type.
    public init?(wireValue: UInt32, attributesType: String) throws(LedgerCoreError) {
        if wireValue != 2, !attributesType.isEmpty {
            throw LedgerCoreError(.corruptEvent, "an attributes type on a send that is not a push-to-start")
        }
        switch wireValue {
        case 0: return nil
        case 1: self = .followers
        case 2:
            guard LiveActivityScope.isValidAttributesType(attributesType) else {
                throw LedgerCoreError(.corruptEvent, "a push-to-start send without a valid attributes type")
            }
            self = .pushToStart(attributesType: attributesType)
        case 3: self = .nowhere
        default: throw LedgerCoreError(.corruptEvent, "sent event with topic_activity \(wireValue)")
        }
    }
}

/// The audience of a send: how many instances it reached and a digest of which.
public struct AudienceRecord: Sendable, Equatable {
    public var messageID: UInt64
    /// The seq of the `sent` event.
    public var sendSeq: UInt64
    public var recipientCount: UInt64
    /// SHA-256 over the recipients' device numbers or tokens, as `digestVersion` says (32 bytes).
    public var recipientDigest: [UInt8]
    /// What `recipientDigest` is taken over (``RecipientDigest/Version``).
    public var digestVersion: RecipientDigest.Version

    public init(
        messageID: UInt64, sendSeq: UInt64, recipientCount: UInt64, recipientDigest: [UInt8],
        digestVersion: RecipientDigest.Version = .current
    ) {
        self.messageID = messageID
        self.sendSeq = sendSeq
        self.recipientCount = recipientCount
        self.recipientDigest = recipientDigest
        self.digestVersion = digestVersion
    }
}

/// An erasure as the log records it: no identifier of the device, only the name it has from then on.
public struct Erasure: Sendable, Equatable {
    /// The device's name in this event and in every earlier event rewritten by the erasure.
    public var pseudonym: RegistrationToken
    /// The seq of the device's first `registered` event (where an auditor finds it in the log).
    public var registeredSeq: UInt64
    /// Why, as the eraser gave it.
    public var reason: String
    /// How many earlier events were rewritten (their records keep their hashes).
    public var redactedEvents: UInt64

    public init(pseudonym: RegistrationToken, registeredSeq: UInt64, reason: String, redactedEvents: UInt64) {
        self.pseudonym = pseudonym
        self.registeredSeq = registeredSeq
        self.reason = reason
        self.redactedEvents = redactedEvents
    }

    /// Whether `token` has the shape of a pseudonym (`erased-` and 32 lowercase hex digits): such a token is never
    /// registered, so that a pseudonym names only the device it replaced.
    public static func isPseudonym(_ token: RegistrationToken) -> Bool {
        let text = token.rawValue.utf8
        guard text.count == 39, token.rawValue.hasPrefix("erased-") else { return false }
        return text.dropFirst(7).allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    /// A fresh pseudonym: `erased-` and 32 random hex digits — never a token the server issues (those start
    /// with `c`–`f` and hold a `:`), and unlinkable to the token it replaces.
    public static func newPseudonym() -> RegistrationToken {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
        return RegistrationToken(trusted: "erased-" + Hex.encode(bytes))
    }
}

/// A retention sweep as the log records it: which seqs it looked at, the cut-off, and what it forgot.
///
/// Every event from ``firstSeq`` through ``throughSeq`` is older than ``cutoff``. Each `sent` record among them
/// whose content was held is rewritten with an empty message and its content seal forgotten for
/// ``reason(at:)`` (its hash still recomputes); a follower applying this event rewrites its copy the same way.
public struct RetentionSweep: Sendable, Equatable {
    public var firstSeq: UInt64
    public var throughSeq: UInt64
    /// Contents of sends before this time are forgotten (the sweep's time less `contentRetention`).
    public var cutoff: LedgerTime
    /// How many sends' contents this sweep forgot.
    public var forgottenContents: UInt64
    /// Sends in the range written before the ledger sealed its fields (encoding version 1): their contents
    /// cannot be forgotten without breaking their hashes, and are kept.
    public var unsealedContents: UInt64

    public init(
        firstSeq: UInt64, throughSeq: UInt64, cutoff: LedgerTime, forgottenContents: UInt64, unsealedContents: UInt64
    ) {
        self.firstSeq = firstSeq
        self.throughSeq = throughSeq
        self.cutoff = cutoff
        self.forgottenContents = forgottenContents
        self.unsealedContents = unsealedContents
    }

    /// The reason a content forgotten by a sweep at `time` gives: `retention at <RFC 3339 time>`.
    public static func reason(at time: LedgerTime) -> String { "retention at \(time.rfc3339)" }
}

/// A topic's iOS 18 broadcast channel as the log records its creation or deletion.
///
/// The channel id is Apple's (`apns-channel-id`, base64 of Apple's bytes): it names a topic's channel, no device
/// or person, so it is stored in the clear and not sealed.
public struct LiveActivityChannelChange: Sendable, Equatable {
    /// The topic the channel carries.
    public var topic: TopicName
    /// Apple's channel id.
    public var channelID: String
    /// Apple's message storage policy (creation only; 0 when deleted): 0 stores nothing, 1 the latest broadcast.
    public var messageStoragePolicy: UInt32
    /// Apple's `apns-request-id` of the creation or deletion.
    public var apnsRequestID: String
    /// Why it was deleted (deletion only, empty when created): `deleted`, or `APNs: ChannelNotRegistered` when
    /// Apple no longer held it.
    public var reason: String

    public init(
        topic: TopicName, channelID: String, messageStoragePolicy: UInt32 = 0, apnsRequestID: String,
        reason: String = ""
    ) {
        self.topic = topic
        self.channelID = channelID
        self.messageStoragePolicy = messageStoragePolicy
        self.apnsRequestID = apnsRequestID
        self.reason = reason
    }
}
