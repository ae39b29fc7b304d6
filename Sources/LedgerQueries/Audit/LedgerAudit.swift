import LedgerStore
import LedgerCore

/// One instance's history and its state at a moment (`ledger audit instance`, the audit API).
public struct InstanceAudit: Sendable {
    public var token: RegistrationToken
    public var instance: InstanceID
    public var platform: String?
    public var appID: String?
    /// Every registration, oldest first.
    public var registrations: [HeldInterval]
    /// Every subscription, by start seq then topic name.
    public var subscriptions: [(topic: TopicName, interval: HeldInterval)]
    /// The moment asked about: the state after applying event `at`.
    public var at: UInt64
    public var registeredAt: Bool
    /// The instance's topics at `at`, by name.
    public var topicsAt: [TopicName]
    /// Every message addressed to the instance up to `at`, oldest first: the sends whose audience (the
    /// state at their own seq) contained it.
    public var deliveries: [InstanceDelivery]
    /// Every APNs device token the instance held, oldest first (the one held now, if any, last and open).
    public var apnsTokens: [HeldAPNsToken]
    /// The device's delivery cursor now: every message sent at or before this seq is acknowledged (0: none).
    public var acknowledgedThrough: UInt64
}

/// A message addressed to one instance (``InstanceAudit/deliveries``).
public struct InstanceDelivery: Sendable, Equatable {
    public var messageID: UInt64
    /// The seq of the `sent` event.
    public var seq: UInt64
    public var time: LedgerTime
    public var target: MessageTarget
    /// Acknowledged by the device (now): its cursor has reached the send.
    public var acknowledged: Bool
    /// What became of its APNs push (`nil`: the instance held no APNs token at the send).
    public var push: PushStatus?
}

/// One topic's subscribers at a moment and its count over time (`ledger audit topic`, the audit API).
public struct TopicAudit: Sendable {
    public var topic: TopicName
    public var at: UInt64
    public var subscriberCount: Int
    /// The members' tokens at `at` in byte order, when asked for.
    public var members: [RegistrationToken]?
    /// The subscriber count after each event that changed it, in seq order.
    public var history: [(seq: UInt64, count: Int)]
}
