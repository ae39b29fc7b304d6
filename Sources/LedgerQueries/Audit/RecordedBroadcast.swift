import FCMWire
import LedgerCore
import LedgerStore

/// The one broadcast of a topic's Live Activity send (``APNsDestination/channel``) as the ledger records it: what
/// `ledger replay`, the audit API and the console say of it.
///
/// Apple does not say which devices held the channel: the send's recipients are the topic's members at the send,
/// addressed by the broadcast; no recipient has a push of its own.
public struct RecordedBroadcast: Sendable, Equatable {
    public enum State: String, Sendable {
        /// Apple took it (``status`` 2xx).
        case accepted
        /// Apple refused it (``status``, ``reason``), or it was never made (the topic had no channel any more).
        case rejected
        /// The message expired before Apple took it.
        case expired
        /// Not made yet.
        case pending
    }

    public var state: State
    /// The channel it went out on (empty while pending, or when the topic had none).
    public var channelID: String
    /// Apple's status (`nil` while pending or when never made).
    public var status: UInt16?
    /// Apple's reason of a refusal, or why it was never made.
    public var reason: String?
    /// Apple's `apns-request-id`.
    public var apnsRequestID: String?
    /// The `pushProgress` event that recorded it, and its time.
    public var seq: UInt64?
    public var time: LedgerTime?

    public init(
        state: State, channelID: String, status: UInt16? = nil, reason: String? = nil, apnsRequestID: String? = nil,
        seq: UInt64? = nil, time: LedgerTime? = nil
    ) {
        self.state = state
        self.channelID = channelID
        self.status = status
        self.reason = reason
        self.apnsRequestID = apnsRequestID
        self.seq = seq
        self.time = time
    }

    /// What it says of the send's recipients: `addressed` only once Apple accepted it; `pending` before it is made;
    /// `notAddressed` when Apple refused it, it expired, or it was never made.
    public var recipients: String {
        switch state {
        case .accepted: "addressed"
        case .pending: "pending"
        case .rejected, .expired: "notAddressed"
        }
    }

    /// The same for a person, of one recipient: `addressed by the broadcast`, `broadcast pending`, or
    /// `not addressed: broadcast rejected`, `… expired`, `… not made`.
    public var recipientNote: String {
        switch state {
        case .accepted: "addressed by the broadcast"
        case .pending: "broadcast pending"
        case .rejected where (status ?? 0) == 0: "not addressed: broadcast not made"
        case .rejected: "not addressed: broadcast rejected"
        case .expired: "not addressed: broadcast expired"
        }
    }

    /// One line for a person: `broadcast to channel <id> at <time>: accepted (apns-request-id <id>)`, `…: rejected
    /// 400 "BadExpirationDate"`, `broadcast pending` (Apple's reason quoted, as `ledger log --format text` quotes
    /// input).
    public var summary: String {
        guard state != .pending else { return "broadcast pending" }
        var text = "broadcast"
        if !channelID.isEmpty { text += " to channel \(EventText.quoted(channelID))" }
        if let time { text += " at \(time)" }
        text += ": \(state.rawValue)"
        if let status, status != 0, state != .accepted { text += " \(status)" }
        if let reason, !reason.isEmpty { text += " \(EventText.quoted(reason))" }
        if let apnsRequestID, !apnsRequestID.isEmpty { text += " (apns-request-id \(apnsRequestID))" }
        return text
    }
}

extension LedgerSnapshot {
    /// The broadcast of the send at `sendSeq` (`sent`): `nil` unless the send was recorded on a channel
    /// (``APNsDestination/channel``); ``RecordedBroadcast/State/pending`` until its `pushProgress` is recorded.
    public func broadcast(ofSendAt sendSeq: UInt64, sent: SentMessage) throws -> RecordedBroadcast? {
        guard sent.apnsDestination == .channel else { return nil }
        // A broadcast recorded before layout 13 names its channel only in its outcome.
        var recorded = RecordedBroadcast(state: .pending, channelID: sent.broadcastChannelID ?? "")
        guard let last = try pushProgressRecords(ofSendAt: sendSeq).last, last.finished else { return recorded }
        guard let event = try event(at: last.seq), case .pushProgress(let progress) = event.body else {
            throw StoreError(.corrupt, "no push progress at seq \(last.seq)")
        }
        recorded.seq = last.seq
        recorded.time = event.time
        guard let outcome = progress.broadcast else {
            // Finished without a broadcast (an expiry recorded by a build before broadcasts).
            recorded.state = progress.expired ? .expired : .rejected
            return recorded
        }
        recorded.channelID = outcome.channelID
        recorded.state = progress.expired ? .expired : outcome.accepted ? .accepted : .rejected
        recorded.status = outcome.status == 0 ? nil : outcome.status
        recorded.reason = outcome.reason.isEmpty ? nil : outcome.reason
        recorded.apnsRequestID = outcome.apnsRequestID.isEmpty ? nil : outcome.apnsRequestID
        return recorded
    }
}
