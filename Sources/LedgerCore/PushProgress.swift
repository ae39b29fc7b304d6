/// How far the APNs pushes of one send have got, as a `pushProgress` event records it.
///
/// A send's pushes go to its recipients that held an APNs token at the send, in instance order (the order in
/// which their tokens were first registered). The pusher records its progress in batches: every recipient up
/// to ``throughToken`` has an outcome — accepted, unless it is among the ``failures`` of this or an earlier
/// event — and those after it are still owed, or (``expired``) never will be.
public struct PushProgress: Sendable, Equatable {
    /// The seq of the `sent` event.
    public var sendSeq: UInt64
    /// The last recipient with an outcome (`nil`: none yet).
    public var throughToken: RegistrationToken?
    /// Every recipient has an outcome; no more progress follows for this send.
    public var finished: Bool
    /// The message's lifetime ended before every recipient was pushed: those after ``throughToken`` never were.
    public var expired: Bool
    /// The outcomes that are not "accepted", among the recipients this event passes.
    public var failures: [PushFailure]
    /// Every send at or before this seq is finished: where the outbox starts after a restart (0: nothing yet).
    public var settledThrough: UInt64
    /// A topic's Live Activity send carried by the topic's broadcast channel: its one broadcast and Apple's answer
    /// (``finished`` with it; no recipient is passed one by one). `nil` for every other send.
    public var broadcast: BroadcastOutcome?

    public init(
        sendSeq: UInt64, throughToken: RegistrationToken?, finished: Bool, expired: Bool = false,
        failures: [PushFailure] = [], settledThrough: UInt64 = 0, broadcast: BroadcastOutcome? = nil
    ) {
        self.broadcast = broadcast
        self.sendSeq = sendSeq
        self.throughToken = throughToken
        self.finished = finished
        self.expired = expired
        self.failures = failures
        self.settledThrough = settledThrough
    }
}

/// A push APNs refused for good.
public struct PushFailure: Sendable, Equatable {
    public enum Kind: String, Sendable, CaseIterable {
        /// 410: the token is no longer valid for the topic; the registration ends.
        case unregistered
        /// 400 `BadDeviceToken` or `DeviceTokenNotForTopic`: the APNs token is cleared.
        case badDeviceToken
        /// Any other final refusal (another 400, 413, …).
        case rejected
    }

    public var token: RegistrationToken
    public var kind: Kind
    /// The HTTP status APNs answered.
    public var status: UInt16
    /// APNs' `reason`.
    public var reason: String

    public init(token: RegistrationToken, kind: Kind, status: UInt16, reason: String) {
        self.token = token
        self.kind = kind
        self.status = status
        self.reason = reason
    }
}
