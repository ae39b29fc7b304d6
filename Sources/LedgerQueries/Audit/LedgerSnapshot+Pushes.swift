import LedgerStore
import LedgerCore
import FCMWire

/// What became of the APNs push of one send to one recipient (the audits, `ledger replay`).
public struct PushStatus: Sendable, Equatable {
    public enum State: String, Sendable {
        /// APNs took it: ``apnsID`` names it; ``seq`` is the progress event that recorded it.
        case accepted
        /// APNs answered 410: the registration ended.
        case unregistered
        /// APNs refused it for good (``status``, ``reason``).
        case failed
        /// Not pushed yet.
        case pending
        /// The message's lifetime ended before it was pushed.
        case expired
    }

    public var state: State
    /// The APNs token it was (or is to be) pushed to: the device's, or for a Live Activity message the activity's.
    public var apnsToken: APNsDeviceToken
    /// Pushed to a Live Activity's token (``APNsDestination/liveActivity(token:)``): a refusal is of that token, and
    /// a 410 is ``State/failed``, not the registration's end.
    public var liveActivity = false
    /// The push's `apns-id` (``APNsPushID``).
    public var apnsID: String
    public var status: UInt16?
    public var reason: String?
    /// The `pushProgress` event that recorded the outcome, and its time.
    public var seq: UInt64?
    public var time: LedgerTime?
}

extension PushStatus {
    /// One line for a person: `accepted <apns-id> at <time>`, `failed 400 "BadTopic" at <time>`, `pending`
    /// (APNs' reason quoted, as `ledger log --format text` quotes input: never raw on a terminal); a Live
    /// Activity's push begins `live activity` and ends with the activity token it went to (`to <hex>`): which
    /// activity a topic send reached, for each follower (audit data, as the recipients' tokens are).
    public var summary: String {
        var text = (liveActivity ? "live activity " : "") + state.rawValue
        if state == .accepted { text += " \(apnsID)" }
        if let status { text += " \(status)" }
        if let reason { text += " \(EventText.quoted(reason))" }
        if let time { text += " at \(time)" }
        if liveActivity { text += " to \(apnsToken.hex)" }
        return text
    }
}

/// How far the pushes of one send have got: its last `pushProgress` event.
public struct PushProgressState: Sendable, Equatable {
    /// Every recipient with an instance id up to this one has an outcome (0: none yet).
    public var through: InstanceID
    public var finished: Bool
    public var expired: Bool
    /// The seq of the event.
    public var seq: UInt64
}

extension LedgerSnapshot {
    /// The last progress recorded for the pushes of the send at `sendSeq` (`nil`: none yet).
    public func pushProgress(ofSendAt sendSeq: UInt64) throws -> PushProgressState? {
        try pushProgressRecords(ofSendAt: sendSeq).last.map {
            PushProgressState(through: $0.through, finished: $0.finished, expired: $0.expired, seq: $0.seq)
        }
    }

    /// The seqs of the sends after `seq`, oldest first, at most `limit` of them.
    public func sendSeqs(after seq: UInt64, limit: Int) throws -> [UInt64] {
        // After the last seq there is nothing (`seq &+ 1` would wrap to 0).
        guard seq < .max else { return [] }
        return try sendSeqs(from: seq + 1, limit: limit)
    }

    /// The recorded pushes of the send at `sendSeq` (message `messageID`), read once for all its recipients.
    /// `expiresAt` is the message's iOS expiry and `now` the time to judge it by: a push not made by then is
    /// `expired`. `destination` is where its pushes go (``SentMessage/apnsDestination``).
    public func pushes(
        ofSendAt sendSeq: UInt64, messageID: UInt64, expiresAt: LedgerTime, now: LedgerTime,
        destination: APNsDestination = .device
    ) throws -> SendPushes {
        let progress = try pushProgressRecords(ofSendAt: sendSeq)
        var times: [UInt64: LedgerTime] = [:]
        for entry in progress {
            guard let event = try event(at: entry.seq) else {
                throw StoreError(.corrupt, "no event at seq \(entry.seq)")
            }
            times[entry.seq] = event.time
        }
        return SendPushes(
            sendSeq: sendSeq, messageID: messageID, destination: destination, progress: progress, times: times,
            unpushedExpired: progress.last?.expired == true || (progress.last?.finished != true && now >= expiresAt))
    }

    /// The token the push of the send at `sendSeq` to `instance` goes to under `destination`, as the tokens were
    /// after that event: the device's APNs token, a Live Activity's token, or for a topic's Live Activity the
    /// activity token the device followed the topic with (or its push-to-start token for the type), in the
    /// environment of its APNs token. `nil`: no push (no APNs token, or no activity token, at the send). The
    /// pusher's rule and the audits'.
    public func pushToken(of instance: InstanceID, at sendSeq: UInt64, destination: APNsDestination) throws
        -> APNsDeviceToken?
    {
        guard let held = try apnsToken(of: instance, at: sendSeq) else { return nil }
        switch destination {
        case .topicFollowers(let topic):
            guard let topicID = try topicID(of: topic) else { return nil }
            return destination.token(
                holding: held, activityToken: try liveActivityToken(of: instance, scope: .topic(topicID), at: sendSeq))
        case .pushToStart(let attributesType):
            return destination.token(
                holding: held,
                activityToken: try liveActivityToken(
                    of: instance, scope: .pushToStart(attributesType: attributesType), at: sendSeq))
        case .device, .liveActivity, .none, .channel:
            return destination.token(holding: held)
        }
    }

    /// What became of the push of `pushes`' send to `instance` (registration `token`); `nil` when the instance
    /// held no APNs token at the send (it is not an APNs recipient), or the send has nowhere to push
    /// (``APNsDestination/none``): the pusher's own rule.
    public func pushStatus(of instance: InstanceID, token: RegistrationToken, in pushes: SendPushes) throws
        -> PushStatus?
    {
        guard let apnsToken = try pushToken(of: instance, at: pushes.sendSeq, destination: pushes.destination) else {
            return nil
        }
        var status = PushStatus(
            state: .pending, apnsToken: apnsToken, apnsID: APNsPushID.string(messageID: pushes.messageID, token: token))
        status.liveActivity = pushes.destination.isLiveActivity
        if let failure = try pushFailure(ofSendAt: pushes.sendSeq, instance: instance) {
            status.state = failure.kind == .unregistered ? .unregistered : .failed
            status.status = failure.status
            status.reason = failure.reason
            status.seq = failure.seq
        } else if let passed = pushes.progress.first(where: { $0.through >= instance }) {
            status.state = .accepted
            status.seq = passed.seq
        } else if pushes.unpushedExpired {
            status.state = .expired
        }
        if let seq = status.seq {
            guard let time = try pushes.times[seq] ?? event(at: seq)?.time else {
                throw StoreError(.corrupt, "no event at seq \(seq)")
            }
            status.time = time
        }
        return status
    }
}

/// One send's recorded pushes (``LedgerSnapshot/pushes(ofSendAt:messageID:expiresAt:now:)``): its progress
/// events and their times, and whether its recipients not yet pushed are past the message's lifetime.
public struct SendPushes: Sendable {
    let sendSeq: UInt64
    let messageID: UInt64
    let destination: APNsDestination
    let progress: [PushRecords.State]
    let times: [UInt64: LedgerTime]
    let unpushedExpired: Bool
}

extension SentMessage {
    /// Where the message's APNs pushes go: the devices' own tokens, or a Live Activity's (``APNsDestination``). A
    /// topic's Live Activity send reads what the ledger recorded with it (`topicActivity`, `broadcastChannelID`),
    /// which outlives its content; once a token send's content is forgotten (an erasure, retention) so is the
    /// activity token it named: read as ``APNsDestination/device``.
    public var apnsDestination: APNsDestination {
        APNsDestination(
            message: DevicePayload.object(ofMessageJSON: messageJSON), target: target,
            broadcastChannel: broadcastChannelID, topicActivity: topicActivity)
    }

    /// When the message stops being pushed to iOS devices (its `apns-expiration`, else 4 weeks after `sentAt`).
    public func iosExpiry(sentAt: LedgerTime) -> LedgerTime {
        MessageLifetime.expiries(of: DevicePayload.object(ofMessageJSON: messageJSON), sentAt: sentAt).ios
    }
}
