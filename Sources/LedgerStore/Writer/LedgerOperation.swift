import LedgerCore

/// One change a request asks of the ledger. Each operation is checked against the state it meets and
/// either appends exactly one event, is accepted without changing anything (and appends nothing), or is
/// rejected without changing anything.
public enum LedgerOperation: Sendable, Equatable {
    /// Registers an instance; rejected with `.alreadyExists` if the token is registered now.
    case register(RegistrationToken, platform: String?, appID: String?)
    /// Unregisters an instance (it leaves every topic); `.notFound` if it is not registered.
    case unregister(RegistrationToken, reason: String)
    /// Subscribes; `.notFound` for an unknown or unregistered token, `.tooManyTopics` at the limit.
    /// With `failIfPresent`, an existing subscription is `.alreadyExists`; otherwise it is an accepted no-op.
    case subscribe(RegistrationToken, TopicName, via: SubscriptionChannel, failIfPresent: Bool = false)
    /// Unsubscribes; `.notFound` for an unknown or unregistered token. With `failIfAbsent`, a missing
    /// subscription is `.notFound`; otherwise it is an accepted no-op.
    case unsubscribe(RegistrationToken, TopicName, via: SubscriptionChannel, failIfAbsent: Bool = false)
    /// Sends a message; a token target that is not registered is `.notFound`. The store assigns the id. A topic's
    /// Live Activity send records where it goes (``TopicActivitySend``): an `update` or `end` in a project that
    /// broadcasts is recorded on the topic's broadcast channel if it has one now (``SentMessage/broadcastChannelID``),
    /// in the same transaction that appends it — whether it is a broadcast is decided from the ledger at its seq, once.
    case send(
        MessageTarget, precedence: ConditionPrecedence, messageJSON: [UInt8], topicActivity: TopicActivitySend? = nil)
    /// Records the audience of a send; `.notFound` for an unknown message, `.alreadyExists` if recorded.
    case recordAudience(AudienceRecord)
    /// Moves the device's delivery cursor: it acknowledges every message sent at or before `through`.
    /// `.notFound` for an unknown or unregistered token, or a seq past the head. An older cursor is an
    /// accepted no-op (the fold keeps the furthest).
    case acknowledge(RegistrationToken, through: UInt64)
    /// Sets or replaces the instance's APNs device token. `.notFound` for an unknown or unregistered token,
    /// `.wrongPlatform` unless it registered as `ios`; the token it holds already is an accepted no-op.
    case setAPNsToken(RegistrationToken, APNsDeviceToken)
    /// Clears the instance's APNs device token (`reason`: who, or APNs' answer). `.notFound` for an unknown
    /// or unregistered token; an instance without one is an accepted no-op.
    case clearAPNsToken(RegistrationToken, reason: String)
    /// Records how far a send's APNs pushes have got (the server's pusher; never from a request).
    case recordPushProgress(PushProgress)
    /// Erases the device's identifiers (``Erasure``): every earlier event naming its registration token or an
    /// APNs token it held is rewritten with a fresh pseudonym in their place, an `erased` event is appended,
    /// and the token names nothing from then on. `.notFound` for a token the ledger does not know (never
    /// registered, or erased already). A request that erases does nothing else, and commits alone; the
    /// ledger's file is compacted before it is answered (``Ledger/append(_:)``). `pseudonym`, when given, is
    /// the one to use (an erasure applied again after a restore: ``ErasureJournal``).
    case erase(RegistrationToken, reason: String, pseudonym: RegistrationToken? = nil)
    /// Forgets the contents of sends older than `cutoff` (``ContentRetention``), at most `limit` sends from
    /// after the last range swept, and appends a `retention` event naming the range; `.unchanged` when no send
    /// older than `cutoff` is left to look at. A request that forgets contents does nothing else and commits
    /// alone; the ledger's file is compacted before it is answered, as after an erasure.
    case forgetContents(before: LedgerTime, limit: Int)
    /// Records the broadcast channel Apple created for a topic (`liveActivityChannelCreated`); `.alreadyExists`
    /// when the topic has one now (the route checks first; this holds when two creations meet).
    case recordLiveActivityChannelCreated(LiveActivityChannelChange)
    /// Records that the topic's broadcast channel was deleted at Apple (`liveActivityChannelDeleted`);
    /// `.notFound` unless the topic has that channel now.
    case recordLiveActivityChannelDeleted(LiveActivityChannelChange)
    /// The device follows the topic's Live Activity with the activity's push token (`liveActivityFollowed`),
    /// replacing the token it followed it with. `.notFound` for an unknown or unregistered token, `.wrongPlatform`
    /// unless it registered as `ios`; following with the token it follows with already is an accepted no-op.
    case followLiveActivity(RegistrationToken, TopicName, pushToken: APNsDeviceToken)
    /// The device no longer follows the topic's Live Activity (`liveActivityUnfollowed`). `.notFound` for an unknown
    /// or unregistered token; one that does not follow it — or, with `ifPushToken`, follows it with another token
    /// (APNs refused that one, and the device followed again since) — is an accepted no-op.
    case unfollowLiveActivity(RegistrationToken, TopicName, reason: String, ifPushToken: APNsDeviceToken? = nil)
    /// Sets or replaces the device's push-to-start token for an ActivityAttributes type (`pushToStartTokenSet`).
    /// `.notFound` and `.wrongPlatform` as ``followLiveActivity(_:_:pushToken:)``; the same token is a no-op.
    case setPushToStartToken(RegistrationToken, attributesType: String, pushToken: APNsDeviceToken)
    /// Retires every follower's activity token of the topic (`liveActivitiesEnded`): the operation after a topic
    /// send whose Live Activity event is `end`, in the same request (`.notFound` without that send before it). A
    /// topic nobody follows is an accepted no-op.
    case endLiveActivities(TopicName)
}

/// How a topic's Live Activity send is recorded (``LedgerOperation/send(_:precedence:messageJSON:topicActivity:)``).
public struct TopicActivitySend: Sendable, Equatable {
    /// Where its pushes go, as its message says (``SentMessage/topicActivity``).
    public var delivery: TopicActivityDelivery
    /// The project broadcasts: a ``TopicActivityDelivery/followers`` send goes out on the topic's channel instead,
    /// if the topic has one when the send is appended.
    public var broadcastIfChannel: Bool

    public init(_ delivery: TopicActivityDelivery, broadcastIfChannel: Bool = false) {
        self.delivery = delivery
        self.broadcastIfChannel = broadcastIfChannel
    }
}

/// A group of operations from one request, appended together and sharing a request id.
public struct WriteRequest: Sendable {
    /// The credential acting (`admin`, `device`, `import`, …); stored in every event.
    public var actor: String
    public var requestID: String
    /// An explicit time for the events (imports of history); must not precede the ledger's head.
    /// `nil` uses the store's clock.
    public var time: LedgerTime?
    public var operations: [LedgerOperation]
    /// Empty, or one entry per operation: the instance id its token had in a snapshot read before the
    /// request was queued (``Ledger/append(_:)`` fills it for large requests), so the writer does not search
    /// the `tokens` tree again. Sound because a token's id, once assigned, never changes and is never
    /// removed (unregistering keeps it; registering again reuses it): what any committed snapshot says about
    /// a token the writer would find too. `nil` (a token the snapshot did not know, or no token) leaves the
    /// writer to look it up. Only registration state, which changes, is always checked by the writer. (An
    /// erasure removes a token's id; the instance it named is no longer registered, so an operation that
    /// meets a stale id for it is refused, as for any unregistered token.)
    var resolvedInstances: [InstanceID?] = []

    /// Whether the request erases devices (its operations are all ``LedgerOperation/erase(_:reason:)``, or it is
    /// refused): it commits in a transaction of its own, and the file is compacted before it is answered.
    public var erases: Bool {
        operations.contains { if case .erase = $0 { true } else { false } }
    }

    /// Whether the request forgets contents (``LedgerOperation/forgetContents(before:limit:)``).
    public var forgetsContents: Bool {
        operations.contains { if case .forgetContents = $0 { true } else { false } }
    }

    /// Whether the request rewrites committed records (an erasure or a retention sweep): it commits in a
    /// transaction of its own, and the file is compacted before it is answered.
    var rewritesLog: Bool { erases || forgetsContents }

    public init(actor: String, requestID: String, time: LedgerTime? = nil, operations: [LedgerOperation]) {
        self.actor = actor
        self.requestID = requestID
        self.time = time
        self.operations = operations
    }
}

extension LedgerOperation {
    /// The registration token the operation acts on, if any.
    var token: RegistrationToken? {
        switch self {
        case .register(let token, _, _), .unregister(let token, _), .subscribe(let token, _, _, _),
            .unsubscribe(let token, _, _, _), .acknowledge(let token, _), .setAPNsToken(let token, _),
            .clearAPNsToken(let token, _), .followLiveActivity(let token, _, _), .unfollowLiveActivity(let token, _, _, _),
            .setPushToStartToken(let token, _, _):
            return token
        case .send(.token(let token), _, _, _): return token
        // An erasure always looks its token up in the transaction that erases it (never a snapshot's answer:
        // the token may have been erased since).
        case .send, .recordAudience, .recordPushProgress, .erase, .forgetContents, .recordLiveActivityChannelCreated,
            .recordLiveActivityChannelDeleted, .endLiveActivities:
            return nil
        }
    }
}

/// Why an operation was refused. Nothing was appended for it.
public struct OperationRejection: Sendable, Equatable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// Every code, for callers that must map each one exhaustively.
        public enum Kind: String, Sendable, CaseIterable { case notFound, alreadyExists, tooManyTopics, wrongPlatform }
        private typealias Base = Kind
        private let base: Base
        private init(_ base: Base) { self.base = base }
        public var kind: Kind { base }
        public static let notFound = Code(.notFound)
        public static let alreadyExists = Code(.alreadyExists)
        public static let tooManyTopics = Code(.tooManyTopics)
        /// The operation needs a registration of another platform (an APNs token on one that is not `ios`).
        public static let wrongPlatform = Code(.wrongPlatform)
        public var description: String { base.rawValue }
    }

    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code): \(message)" }

    /// The refusal of an operation on a token that is not registered now (never, no longer, expired or erased).
    public static let unregistered = OperationRejection(.notFound, "registration token is not registered")

    /// Whether this is ``unregistered``: FCM's `UNREGISTERED` to a device, where other refusals are `NOT_FOUND`.
    public var isUnregistered: Bool { self == Self.unregistered }
}

/// What became of one operation.
public enum OperationOutcome: Sendable, Equatable {
    /// The operation's event is durable at `seq`.
    case appended(seq: UInt64)
    /// A send's event is durable at `seq` with the assigned message id.
    case sent(seq: UInt64, messageID: UInt64)
    /// Accepted, but it would change nothing (a re-subscribe, an allowed unsubscribe of a missing
    /// subscription, an older acknowledgement, a token repeated in one batch): nothing is appended, so
    /// repeating a request can never grow the log.
    case unchanged
    case rejected(OperationRejection)

    public var rejection: OperationRejection? {
        if case .rejected(let rejection) = self { return rejection }
        return nil
    }

    public var seq: UInt64? {
        switch self {
        case .appended(let seq), .sent(let seq, _): seq
        case .unchanged, .rejected: nil
        }
    }
}

/// The durable result of a request: one outcome per operation, in order.
public struct WriteReceipt: Sendable, Equatable {
    public var outcomes: [OperationOutcome]
    /// The time stamped on the request's events.
    public var time: LedgerTime
    /// The `audience` events appended with the request's sends, in the same transaction: message id → seq
    /// (``Ledger/Options/inlineAudienceLimit``). A send not here has its audience recorded after it.
    public var recordedAudiences: [UInt64: UInt64] = [:]
}
