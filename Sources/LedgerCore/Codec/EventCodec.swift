import Foundation
import SwiftProtobuf

/// Encodes events as `formatVersion ‖ protobuf(topicledger.v1.Event)` and decodes them back.
///
/// The schema is `ledger_event.proto` beside this file; `docs/event-format.md` documents the layout so
/// that another language can read the log. Generated code is committed (`tools/generate-protobuf.sh`).
public enum EventCodec {
    /// The encoding version of an event written before the ledger sealed its fields: its hash is over these bytes.
    public static let formatVersion: UInt8 = 1
    /// The first byte of an event of version 1 rewritten by an erasure: the same encoding, with the erased
    /// device's identifiers replaced by its pseudonym. Its record keeps the hash of the bytes it replaced, which
    /// these bytes no longer reproduce (``isRedacted(_:)``): a holder of the token can rebuild the original and
    /// find the record by its hash (docs/compliance.md, "linkable").
    public static let redactedVersion: UInt8 = 2
    /// The encoding version this build writes: the event with its ``Seal``s (field 30), its hash over its
    /// *hashed form* (``appendHashedForm(of:to:)``), every sealed value replaced by its commitment.
    public static let sealedVersion: UInt8 = 3

    /// An ActivityKit token (an activity's push token or a push-to-start token) as stored: the bytes of an APNs token
    /// (``APNsDeviceToken/byteRange``), held without an environment (it is pushed in its device's).
    ///
    /// - Throws: `LedgerCoreError.corruptEvent` for bytes of another length.
    private static func activityToken(_ bytes: Data, seq: UInt64) throws(LedgerCoreError) -> APNsDeviceToken {
        do {
            return try APNsDeviceToken(bytes: Array(bytes), sandbox: false)
        } catch {
            throw LedgerCoreError(.corruptEvent, "event \(seq): \(error.message)")
        }
    }

    /// Whether `encoded` is an event rewritten by an erasure (its hash is the original's, not its own).
    public static func isRedacted(_ encoded: UnsafeRawBufferPointer) -> Bool { encoded.first == redactedVersion }

    /// `event` as an erasure rewrites an unsealed one: its encoding under ``redactedVersion``.
    public static func encodeRedacted(_ event: LedgerEvent) -> [UInt8] {
        var unsealed = event
        unsealed.seals = nil
        var bytes = encode(unsealed)
        bytes[0] = redactedVersion
        return bytes
    }

    /// Encodes `event`: under ``sealedVersion`` when it has seals, else ``formatVersion``.
    public static func encode(_ event: LedgerEvent) -> [UInt8] {
        var bytes: [UInt8] = []
        append(event, to: &bytes)
        return bytes
    }

    /// Appends the encoding of `event` to `bytes`, reserving room for it first (the appender encodes
    /// straight after the record's hash; see ``HashChain/appendRecord(of:chainingFrom:to:)``).
    ///
    /// The common kinds are written by ``CanonicalEventEncoder``, the others by SwiftProtobuf; the bytes are
    /// the same either way (a property test compares them). The seals follow the body, as field 30.
    public static func append(_ event: LedgerEvent, to bytes: inout [UInt8]) {
        guard let seals = event.seals else { return appendMessage(event, after: formatVersion, to: &bytes) }
        appendMessage(event, after: sealedVersion, to: &bytes)
        SealWire.append(seals, to: &bytes)
    }

    /// Appends the hashed form of a sealed event, `0x03 ‖ protobuf(event)` with each sealed value replaced by its
    /// commitment and no seals (docs/event-format.md, "Sealed fields"); false, with `bytes` untouched, for an event
    /// without seals or with seals that do not match its sealed values.
    @discardableResult
    public static func appendHashedForm(of event: LedgerEvent, to bytes: inout [UInt8]) -> Bool {
        guard let view = event.hashedView else { return false }
        appendMessage(view, after: sealedVersion, to: &bytes)
        return true
    }

    /// Appends `version`, then the protobuf message of `event` without its seals.
    private static func appendMessage(_ event: LedgerEvent, after version: UInt8, to bytes: inout [UInt8]) {
        if CanonicalEventEncoder.append(event, after: version, to: &bytes) { return }
        let body = encodeWithSwiftProtobuf(event)
        bytes.reserveRoom(for: 1 + body.count)
        bytes.append(version)
        bytes.append(contentsOf: body)
    }

    /// The protobuf message of `event` (without the version byte) as SwiftProtobuf writes it: the path for
    /// sends and audiences, and the reference the tests compare ``CanonicalEventEncoder`` with.
    package static func encodeWithSwiftProtobuf(_ event: LedgerEvent) -> [UInt8] {
        // Serializing a fully built proto3 message cannot fail (no required fields, no unknown types).
        try! message(event).serializedBytes()
    }

    private static func message(_ event: LedgerEvent) -> Topicledger_V1_Event {
        var message = Topicledger_V1_Event()
        message.seq = event.seq
        message.timeMicros = event.time.microseconds
        message.actor = event.actor
        message.requestID = event.requestID
        switch event.body {
        case .registered(let token, let platform, let appID):
            var body = Topicledger_V1_Registered()
            body.token = token.rawValue
            if let platform { body.platform = platform }
            if let appID { body.appID = appID }
            message.body = .registered(body)
        case .unregistered(let token, let reason):
            var body = Topicledger_V1_Unregistered()
            body.token = token.rawValue
            body.reason = reason
            message.body = .unregistered(body)
        case .subscribed(let token, let topic, let via):
            var body = Topicledger_V1_Subscribed()
            body.token = token.rawValue
            body.topic = topic.rawValue
            body.via = via.protobuf
            message.body = .subscribed(body)
        case .unsubscribed(let token, let topic, let via):
            var body = Topicledger_V1_Unsubscribed()
            body.token = token.rawValue
            body.topic = topic.rawValue
            body.via = via.protobuf
            message.body = .unsubscribed(body)
        case .sent(let sent):
            var body = Topicledger_V1_Sent()
            body.messageID = sent.messageID
            body.targetKind = sent.target.protobufKind
            body.target = sent.target.text
            body.precedence = sent.precedence.protobuf
            body.messageJson = Data(sent.messageJSON)
            body.broadcastChannelID = sent.broadcastChannelID ?? ""
            body.topicActivity = sent.topicActivity?.wireValue ?? 0
            if case .pushToStart(let type)? = sent.topicActivity { body.attributesType = type }
            message.body = .sent(body)
        case .audience(let audience):
            var body = Topicledger_V1_Audience()
            body.messageID = audience.messageID
            body.sendSeq = audience.sendSeq
            body.recipientCount = audience.recipientCount
            body.recipientDigest = Data(audience.recipientDigest)
            // Version 1 stays absent, so an audience of version 1 re-encodes to the bytes it was hashed as.
            body.digestVersion = audience.digestVersion == .tokens ? 0 : audience.digestVersion.rawValue
            message.body = .audience(body)
        case .acknowledged(let token, let through):
            var body = Topicledger_V1_Acknowledged()
            body.token = token.rawValue
            body.throughSeq = through
            message.body = .acknowledged(body)
        case .apnsTokenSet(let token, let apnsToken):
            var body = Topicledger_V1_ApnsTokenSet()
            body.token = token.rawValue
            body.apnsToken = Data(apnsToken.bytes)
            body.sandbox = apnsToken.sandbox
            message.body = .apnsTokenSet(body)
        case .apnsTokenCleared(let token, let reason):
            var body = Topicledger_V1_ApnsTokenCleared()
            body.token = token.rawValue
            body.reason = reason
            message.body = .apnsTokenCleared(body)
        case .pushProgress(let progress):
            var body = Topicledger_V1_PushProgress()
            body.sendSeq = progress.sendSeq
            body.throughToken = progress.throughToken?.rawValue ?? ""
            body.finished = progress.finished
            body.expired = progress.expired
            body.failures = progress.failures.map { failure in
                var entry = Topicledger_V1_PushFailure()
                entry.token = failure.token.rawValue
                entry.kind = failure.kind.protobuf
                entry.status = UInt32(failure.status)
                entry.reason = failure.reason
                return entry
            }
            body.settledThrough = progress.settledThrough
            if let outcome = progress.broadcast {
                var broadcast = Topicledger_V1_Broadcast()
                broadcast.channelID = outcome.channelID
                broadcast.status = UInt32(outcome.status)
                broadcast.reason = outcome.reason
                broadcast.apnsRequestID = outcome.apnsRequestID
                body.broadcast = broadcast
            }
            message.body = .pushProgress(body)
        case .erased(let erasure):
            var body = Topicledger_V1_Erased()
            body.pseudonym = erasure.pseudonym.rawValue
            body.registeredSeq = erasure.registeredSeq
            body.reason = erasure.reason
            body.redactedEvents = erasure.redactedEvents
            message.body = .erased(body)
        case .retention(let sweep):
            var body = Topicledger_V1_Retention()
            body.firstSeq = sweep.firstSeq
            body.throughSeq = sweep.throughSeq
            body.cutoffMicros = sweep.cutoff.microseconds
            body.forgottenContents = sweep.forgottenContents
            body.unsealedContents = sweep.unsealedContents
            message.body = .retention(body)
        case .liveActivityChannelCreated(let change):
            var body = Topicledger_V1_LiveActivityChannelCreated()
            body.topic = change.topic.rawValue
            body.channelID = change.channelID
            body.messageStoragePolicy = change.messageStoragePolicy
            body.apnsRequestID = change.apnsRequestID
            message.body = .liveActivityChannelCreated(body)
        case .liveActivityChannelDeleted(let change):
            var body = Topicledger_V1_LiveActivityChannelDeleted()
            body.topic = change.topic.rawValue
            body.channelID = change.channelID
            body.apnsRequestID = change.apnsRequestID
            body.reason = change.reason
            message.body = .liveActivityChannelDeleted(body)
        case .liveActivityFollowed(let token, let topic, let pushToken):
            var body = Topicledger_V1_LiveActivityFollowed()
            body.token = token.rawValue
            body.topic = topic.rawValue
            body.pushToken = Data(pushToken.bytes)
            message.body = .liveActivityFollowed(body)
        case .liveActivityUnfollowed(let token, let topic, let reason):
            var body = Topicledger_V1_LiveActivityUnfollowed()
            body.token = token.rawValue
            body.topic = topic.rawValue
            body.reason = reason
            message.body = .liveActivityUnfollowed(body)
        case .pushToStartTokenSet(let token, let attributesType, let pushToken):
            var body = Topicledger_V1_PushToStartTokenSet()
            body.token = token.rawValue
            body.attributesType = attributesType
            body.pushToken = Data(pushToken.bytes)
            message.body = .pushToStartTokenSet(body)
        case .liveActivitiesEnded(let topic, let sendSeq, let messageID):
            var body = Topicledger_V1_LiveActivitiesEnded()
            body.topic = topic.rawValue
            body.sendSeq = sendSeq
            body.messageID = messageID
            message.body = .liveActivitiesEnded(body)
        }
        return message
    }

    /// Decodes an encoded event.
    ///
    /// - Throws: `.unsupportedVersion` for another format version, `.corruptEvent` for bytes that do not
    ///   decode or lack a body.
    public static func decode(_ bytes: UnsafeRawBufferPointer) throws(LedgerCoreError) -> LedgerEvent {
        guard let version = bytes.first else { throw LedgerCoreError(.corruptEvent, "empty event") }
        guard version == formatVersion || version == redactedVersion || version == sealedVersion else {
            throw LedgerCoreError(
                .unsupportedVersion,
                "event encoding version \(version) is not supported by this build (it reads versions \(formatVersion),"
                    + " \(redactedVersion) and \(sealedVersion))")
        }
        let body = UnsafeRawBufferPointer(rebasing: bytes.dropFirst())
        let sealed = version == sealedVersion
        if let event = CanonicalEventDecoder.decode(body, sealed: sealed) { return event }
        var event = try decodeWithSwiftProtobuf(body)
        if sealed {
            event.seals = try SealWire.seals(in: body)
            guard event.seals?.count == event.body.sealedValueCount else {
                throw LedgerCoreError(
                    .corruptEvent,
                    "event \(event.seq) has \(event.seals?.count ?? 0) seals for \(event.body.sealedValueCount) sealed values"
                )
            }
        }
        return event
    }

    /// Decodes the protobuf message (after the version byte) by SwiftProtobuf's full rules: the path for
    /// whatever ``CanonicalEventDecoder`` defers, and the reference the tests compare it with.
    package static func decodeWithSwiftProtobuf(_ body: UnsafeRawBufferPointer) throws(LedgerCoreError) -> LedgerEvent {
        let message: Topicledger_V1_Event
        do {
            message = try Topicledger_V1_Event(serializedBytes: RawSpan(_unsafeBytes: body))
        } catch {
            throw LedgerCoreError(.corruptEvent, "event does not decode: \(error)")
        }
        return try event(from: message)
    }

    /// Decodes an encoded event held in an array.
    public static func decode(_ bytes: [UInt8]) throws(LedgerCoreError) -> LedgerEvent {
        do {
            return try bytes.withUnsafeBytes { buffer in try decode(buffer) }
        } catch let error as LedgerCoreError {
            throw error
        } catch {
            throw LedgerCoreError(.corruptEvent, "\(error)")
        }
    }

    private static func event(from message: Topicledger_V1_Event) throws(LedgerCoreError) -> LedgerEvent {
        let body: LedgerEvent.Body
        switch message.body {
        case .registered(let value):
            body = .registered(
                token: RegistrationToken(trusted: value.token),
                platform: value.hasPlatform ? value.platform : nil,
                appID: value.hasAppID ? value.appID : nil)
        case .unregistered(let value):
            body = .unregistered(token: RegistrationToken(trusted: value.token), reason: value.reason)
        case .subscribed(let value):
            body = .subscribed(
                token: RegistrationToken(trusted: value.token), topic: TopicName(trusted: value.topic),
                via: try SubscriptionChannel(value.via))
        case .unsubscribed(let value):
            body = .unsubscribed(
                token: RegistrationToken(trusted: value.token), topic: TopicName(trusted: value.topic),
                via: try SubscriptionChannel(value.via))
        case .sent(let value):
            let target: MessageTarget
            switch value.targetKind {
            case .targetTopic: target = .topic(TopicName(trusted: value.target))
            case .targetCondition: target = .condition(value.target)
            case .targetToken: target = .token(RegistrationToken(trusted: value.target))
            default: throw LedgerCoreError(.corruptEvent, "sent event without a target kind")
            }
            body = .sent(
                SentMessage(
                    messageID: value.messageID, target: target, precedence: try ConditionPrecedence(value.precedence),
                    messageJSON: Array(value.messageJson),
                    broadcastChannelID: value.broadcastChannelID.isEmpty ? nil : value.broadcastChannelID,
                    topicActivity: try TopicActivityDelivery(
                        wireValue: value.topicActivity, attributesType: value.attributesType)))
        case .audience(let value):
            guard let version = RecipientDigest.Version(stored: value.digestVersion) else {
                throw LedgerCoreError(
                    .corruptEvent, "event \(message.seq): recipient digest version \(value.digestVersion) is unknown")
            }
            body = .audience(
                AudienceRecord(
                    messageID: value.messageID, sendSeq: value.sendSeq, recipientCount: value.recipientCount,
                    recipientDigest: Array(value.recipientDigest), digestVersion: version))
        case .acknowledged(let value):
            body = .acknowledged(token: RegistrationToken(trusted: value.token), through: value.throughSeq)
        case .apnsTokenSet(let value):
            let apnsToken: APNsDeviceToken
            do {
                apnsToken = try APNsDeviceToken(bytes: Array(value.apnsToken), sandbox: value.sandbox)
            } catch {
                throw LedgerCoreError(.corruptEvent, "event \(message.seq): \(error.message)")
            }
            body = .apnsTokenSet(token: RegistrationToken(trusted: value.token), apnsToken: apnsToken)
        case .apnsTokenCleared(let value):
            body = .apnsTokenCleared(token: RegistrationToken(trusted: value.token), reason: value.reason)
        case .pushProgress(let value):
            var failures: [PushFailure] = []
            for entry in value.failures {
                // A stored status is an HTTP status: anything else is a damaged event, not a number to trap on.
                guard let status = UInt16(exactly: entry.status), status <= 999 else {
                    throw LedgerCoreError(.corruptEvent, "event \(message.seq): a push status of \(entry.status)")
                }
                failures.append(
                    PushFailure(
                        token: RegistrationToken(trusted: entry.token), kind: try PushFailure.Kind(entry.kind),
                        status: status, reason: entry.reason))
            }
            var broadcast: BroadcastOutcome?
            if value.hasBroadcast {
                guard let status = UInt16(exactly: value.broadcast.status), status <= 999 else {
                    throw LedgerCoreError(
                        .corruptEvent, "event \(message.seq): a broadcast status of \(value.broadcast.status)")
                }
                broadcast = BroadcastOutcome(
                    channelID: value.broadcast.channelID, status: status, reason: value.broadcast.reason,
                    apnsRequestID: value.broadcast.apnsRequestID)
            }
            body = .pushProgress(
                PushProgress(
                    sendSeq: value.sendSeq,
                    throughToken: value.throughToken.isEmpty ? nil : RegistrationToken(trusted: value.throughToken),
                    finished: value.finished, expired: value.expired, failures: failures,
                    settledThrough: value.settledThrough, broadcast: broadcast))
        case .erased(let value):
            body = .erased(
                Erasure(
                    pseudonym: RegistrationToken(trusted: value.pseudonym), registeredSeq: value.registeredSeq,
                    reason: value.reason, redactedEvents: value.redactedEvents))
        case .retention(let value):
            body = .retention(
                RetentionSweep(
                    firstSeq: value.firstSeq, throughSeq: value.throughSeq,
                    cutoff: LedgerTime(microseconds: value.cutoffMicros), forgottenContents: value.forgottenContents,
                    unsealedContents: value.unsealedContents))
        case .liveActivityChannelCreated(let value):
            body = .liveActivityChannelCreated(
                LiveActivityChannelChange(
                    topic: TopicName(trusted: value.topic), channelID: value.channelID,
                    messageStoragePolicy: value.messageStoragePolicy, apnsRequestID: value.apnsRequestID))
        case .liveActivityChannelDeleted(let value):
            body = .liveActivityChannelDeleted(
                LiveActivityChannelChange(
                    topic: TopicName(trusted: value.topic), channelID: value.channelID,
                    apnsRequestID: value.apnsRequestID,
                    reason: value.reason))
        case .liveActivityFollowed(let value):
            body = .liveActivityFollowed(
                token: RegistrationToken(trusted: value.token), topic: TopicName(trusted: value.topic),
                pushToken: try activityToken(value.pushToken, seq: message.seq))
        case .liveActivityUnfollowed(let value):
            body = .liveActivityUnfollowed(
                token: RegistrationToken(trusted: value.token), topic: TopicName(trusted: value.topic),
                reason: value.reason)
        case .pushToStartTokenSet(let value):
            // The type names a projection key (at most 255 bytes): a stored name the route would refuse is a corrupt
            // event, not a key cut short.
            guard LiveActivityScope.isValidAttributesType(value.attributesType) else {
                throw LedgerCoreError(.corruptEvent, "event \(message.seq) holds an attributes type that is not one")
            }
            body = .pushToStartTokenSet(
                token: RegistrationToken(trusted: value.token), attributesType: value.attributesType,
                pushToken: try activityToken(value.pushToken, seq: message.seq))
        case .liveActivitiesEnded(let value):
            body = .liveActivitiesEnded(
                topic: TopicName(trusted: value.topic), sendSeq: value.sendSeq, messageID: value.messageID)
        case nil:
            throw LedgerCoreError(.corruptEvent, "event \(message.seq) has no body")
        }
        return LedgerEvent(
            seq: message.seq, time: LedgerTime(microseconds: message.timeMicros), actor: message.actor,
            requestID: message.requestID, body: body)
    }
}

extension SubscriptionChannel {
    fileprivate var protobuf: Topicledger_V1_Via {
        switch self {
        case .client: .client
        case .v1: .v1
        case .iid: .iid
        }
    }

    fileprivate init(_ via: Topicledger_V1_Via) throws(LedgerCoreError) {
        switch via {
        case .client: self = .client
        case .v1: self = .v1
        case .iid: self = .iid
        default: throw LedgerCoreError(.corruptEvent, "unknown subscription channel \(via.rawValue)")
        }
    }
}

extension PushFailure.Kind {
    fileprivate var protobuf: Topicledger_V1_PushFailureKind {
        switch self {
        case .unregistered: .pushFailureUnregistered
        case .badDeviceToken: .pushFailureBadDeviceToken
        case .rejected: .pushFailureRejected
        }
    }

    fileprivate init(_ kind: Topicledger_V1_PushFailureKind) throws(LedgerCoreError) {
        switch kind {
        case .pushFailureUnregistered: self = .unregistered
        case .pushFailureBadDeviceToken: self = .badDeviceToken
        case .pushFailureRejected: self = .rejected
        default: throw LedgerCoreError(.corruptEvent, "unknown push failure kind \(kind.rawValue)")
        }
    }
}

extension MessageTarget {
    fileprivate var protobufKind: Topicledger_V1_TargetKind {
        switch self {
        case .topic: .targetTopic
        case .condition: .targetCondition
        case .token: .targetToken
        }
    }
}

extension ConditionPrecedence {
    fileprivate var protobuf: Topicledger_V1_Precedence {
        switch self {
        case .leftToRight: .leftToRight
        case .standard: .standard
        }
    }

    fileprivate init(_ precedence: Topicledger_V1_Precedence) throws(LedgerCoreError) {
        switch precedence {
        case .leftToRight: self = .leftToRight
        case .standard: self = .standard
        default: throw LedgerCoreError(.corruptEvent, "unknown precedence rule \(precedence.rawValue)")
        }
    }
}
