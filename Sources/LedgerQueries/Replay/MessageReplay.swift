import LedgerStore
import LedgerCore

/// Who a past message was addressed to, reconstructed from the ledger, beside what was recorded when it
/// was sent (`ledger replay`, the audit API).
public struct MessageReplay: Sendable {
    public var messageID: UInt64
    /// The seq and time of the `sent` event.
    public var seq: UInt64
    public var time: LedgerTime
    public var target: MessageTarget
    /// The rule the condition is evaluated with: the one stored in the `sent` event.
    public var precedence: ConditionPrecedence
    /// The message as accepted (JSON); empty, or the text with an erased device's identifiers rewritten, once its
    /// content is forgotten (``contentForgotten``).
    public var messageJSON: [UInt8]
    /// Why the content was forgotten ("erasure", "retention at <time>"); `nil` while it is held.
    public var contentForgotten: String? = nil
    /// The recipients' tokens in byte order (an erased recipient's pseudonym in its place).
    public var recipients: [RegistrationToken]
    /// Per recipient (same order): its device number (``RecipientDigest/Version/devices``).
    public var devices: [InstanceID]
    /// The recipient digest of the reconstruction, in the version of the recorded audience (the current
    /// version when none is recorded yet): of `devices`, or of `recipients`.
    public var recipientDigest: [UInt8]
    public var digestVersion: RecipientDigest.Version
    /// The `audience` event recorded for the send and its seq, if recorded yet.
    public var recorded: (record: AudienceRecord, seq: UInt64)?
    /// Per recipient (same order): whether the device has acknowledged the message (its delivery cursor is
    /// at or past the send).
    public var acknowledged: [Bool]
    /// Per recipient (same order): what became of its APNs push (`nil`: it held no APNs token at the send, or the
    /// send is a broadcast).
    public var pushes: [PushStatus?]
    /// A topic's Live Activity send: its one broadcast on the topic's channel (``RecordedBroadcast``), which
    /// addressed every recipient; `nil` for every other send.
    public var broadcast: RecordedBroadcast? = nil

    public var recipientCount: Int { recipients.count }
    public var acknowledgedCount: Int { acknowledged.lazy.filter { $0 }.count }

    /// Recipients erased since (shown by their pseudonyms).
    public var erasedRecipients: Int { recipients.lazy.filter(Erasure.isPseudonym).count }

    /// Whether the digest could be recomputed: always for a version-2 digest (over device numbers, which an
    /// erasure keeps); for a version-1 digest (over tokens) only while none of its recipients is erased.
    public var digestRecomputable: Bool { digestVersion == .devices || erasedRecipients == 0 }

    /// Whether the reconstruction equals the recorded audience (false when none is recorded): the count and
    /// the digest, or the count alone when the digest is not recomputable (``digestRecomputable``).
    public var matchesRecord: Bool {
        guard let recorded else { return false }
        return recorded.record.recipientCount == UInt64(recipients.count)
            && (recorded.record.recipientDigest == recipientDigest || !digestRecomputable)
    }

    /// Replays message `messageID` of `snapshot`, or `nil` when the ledger has no such message.
    ///
    /// - Parameter naive: recompute the recipients by folding the log from seq 1 with the shared fold into
    ///   an in-memory state and testing every registered instance against the target — an independent path
    ///   that reads neither the temporal index nor any projection. O(log) instead of O(the topics involved).
    public static func replay(_ messageID: UInt64, in snapshot: LedgerSnapshot, naive: Bool = false) throws
        -> MessageReplay?
    {
        guard let (sendSeq, audienceSeq) = try snapshot.message(messageID) else { return nil }
        let (event, sent) = try snapshot.sentEvent(at: sendSeq)
        let list =
            naive
            ? try naiveRecipients(of: sent, before: sendSeq, in: snapshot)
            : try snapshot.recipients(of: sent, at: sendSeq)
        let recipients = list.map(\.token)
        let devices = list.map(\.device)
        var recorded: (AudienceRecord, UInt64)?
        if let audienceSeq {
            guard let audienceEvent = try snapshot.event(at: audienceSeq),
                case .audience(let record) = audienceEvent.body, record.messageID == messageID
            else {
                throw StoreError(.corrupt, "the audience of message \(messageID) is not at seq \(audienceSeq)")
            }
            recorded = (record, audienceSeq)
        }
        let acknowledged = try devices.map { try snapshot.acknowledgedThrough($0) >= sendSeq }
        var pushes = [PushStatus?](repeating: nil, count: recipients.count)
        if try snapshot.holdsAPNsTokens() {
            let sendPushes = try snapshot.pushes(
                ofSendAt: sendSeq, messageID: messageID, expiresAt: sent.iosExpiry(sentAt: event.time),
                now: LedgerTime.now(), destination: sent.apnsDestination)
            for (index, recipient) in list.enumerated() {
                pushes[index] = try snapshot.pushStatus(of: recipient.device, token: recipient.token, in: sendPushes)
            }
        }
        let broadcast = try snapshot.broadcast(ofSendAt: sendSeq, sent: sent)
        let version = recorded?.0.digestVersion ?? .current
        let digest =
            switch version {
            case .devices: RecipientDigest.digest(ascendingDevices: devices.sorted())
            case .tokens: RecipientDigest.digest(sortedTokens: recipients)
            }
        return MessageReplay(
            messageID: messageID, seq: sendSeq, time: event.time, target: sent.target, precedence: sent.precedence,
            messageJSON: sent.messageJSON, contentForgotten: event.contentForgotten, recipients: recipients,
            devices: devices, recipientDigest: digest, digestVersion: version, recorded: recorded,
            acknowledged: acknowledged, pushes: pushes, broadcast: broadcast)
    }

    /// The naive path: events 1…S−1 folded in memory, then every registered instance tested. Device numbers
    /// are the in-memory fold's own instance ids.
    static func naiveRecipients(of sent: SentMessage, before sendSeq: UInt64, in snapshot: LedgerSnapshot) throws
        -> [(token: RegistrationToken, device: InstanceID)]
    {
        var state = InMemoryLedgerState()
        if sendSeq > 1 {
            try snapshot.forEachEvent(from: 1, through: sendSeq - 1) { event, _ in
                state.apply(event)
                return true
            }
        }
        let recipients: Set<RegistrationToken>
        switch sent.target {
        case .token(let token):
            recipients = state.isRegistered(token) ? [token] : []
        case .topic(let topic):
            recipients = state.registeredTokens.filter { state.topics(of: $0).contains(topic) }
        case .condition(let text):
            let condition = try Condition(parsing: text, precedence: sent.precedence)
            recipients = state.registeredTokens.filter { condition.isSatisfied(byTopics: state.topics(of: $0)) }
        }
        return try recipients.sorted().map { token in
            guard let device = state.instanceID(for: token) else {
                throw StoreError(.corrupt, "the naive fold lists a recipient it has no instance for")
            }
            return (token, device)
        }
    }
}
