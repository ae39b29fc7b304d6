/// What Apple answered to the one broadcast of a topic's Live Activity send (`POST /4/broadcasts/apps/<bundle id>`
/// on the topic's iOS 18 channel), as the send's `pushProgress` event records it.
///
/// Apple does not say which devices held the channel: the send's recipients in the ledger are the topic's members
/// at the send, addressed by the broadcast, and no per-device outcome exists.
public struct BroadcastOutcome: Sendable, Equatable {
    /// The channel the broadcast went out on (`apns-channel-id`).
    public var channelID: String
    /// Apple's HTTP status (200: Apple took it); 0 when it was never made (the topic had no channel any more, the
    /// message expired first).
    public var status: UInt16
    /// Apple's `reason` of a refusal, or why it was never made; empty when Apple took it.
    public var reason: String
    /// Apple's `apns-request-id` of the answer (empty when there was none).
    public var apnsRequestID: String

    public init(channelID: String, status: UInt16, reason: String = "", apnsRequestID: String = "") {
        self.channelID = channelID
        self.status = status
        self.reason = reason
        self.apnsRequestID = apnsRequestID
    }

    /// Whether Apple took the broadcast (a 2xx).
    public var accepted: Bool { (200..<300).contains(status) }
}
