import LedgerCore

/// FCM's Live Activity messages: a send to one registration token (`message.token`) whose `apns` carries
/// `live_activity_token`, an ActivityKit push-to-start token or an activity's push token (FCM, "Get started with
/// Live Activity"). It is pushed to that token, not to the device's own APNs token, as Apple's ActivityKit pushes
/// are (Apple, "Starting and updating Live Activities with ActivityKit push notifications", *Construct the
/// ActivityKit remote push notification payload*):
///
/// - `apns-push-type: liveactivity`; `apns-topic: <bundle id>.push-type.liveactivity`;
/// - `apns-priority` 5 or 10, from `apns.headers`; 10 when none is given, APNs' own default for these pushes
///   (*Determine the update frequency*).
///
/// The payload is checked as that article documents it, each refusal naming its field (``validate(_:target:)``).
public enum LiveActivityMessage {
    /// The `apns-push-type` of every ActivityKit push.
    public static let pushType = "liveactivity"
    /// What the app's bundle id takes for the `apns-topic` of an ActivityKit push.
    public static let topicSuffix = ".push-type.liveactivity"
    /// `aps.event`: `start` (with a push-to-start token), `update` and `end` (with an activity's push token).
    public static let events: Set<String> = ["start", "update", "end"]
    /// The `apns-priority` values Apple allows for an ActivityKit push.
    public static let priorities: Set<String> = ["5", "10"]
    /// The field named when the activity token is wrong or missing.
    public static let tokenField = "message.apns.live_activity_token"

    /// The `apns-topic` of an ActivityKit push for the app `bundleID`.
    public static func topic(bundleID: String) -> String { bundleID + topicSuffix }

    /// The activity token of a stored message: `apns.live_activity_token` (or `liveActivityToken`) when it is the
    /// hex of an APNs token (``APNsDeviceToken/byteRange``); `nil` for any other message, or a damaged one.
    public static func activityToken(of message: [String: JSONValue]) -> [UInt8]? {
        guard let apns = message["apns"], let text = PlatformValidation.field(apns, "live_activity_token")?.string,
            let token = try? APNsDeviceToken(hex: text, sandbox: false)
        else { return nil }
        return token.bytes
    }

    /// Whether a stored message asks for a Live Activity push: it carries `apns.live_activity_token`, or its
    /// `apns-push-type` header says `liveactivity`.
    static func isRequested(by message: [String: JSONValue]) -> Bool {
        guard let apns = message["apns"], let members = apns.object else { return false }
        return PlatformValidation.field(apns, "live_activity_token") != nil
            || header("apns-push-type", in: members)?.value.string == pushType
    }

    // MARK: Validation

    /// Checks a message's Live Activity rules, after ``PlatformValidation`` has checked the types of `apns`.
    ///
    /// - A `live_activity_token` is for a token send (FCM documents it with `message.token` only): with a topic or
    ///   a condition it is refused. It must be the hex of an APNs token, and the `apns-push-type` header, if given,
    ///   must be `liveactivity`.
    /// - `apns-push-type: liveactivity` without a `live_activity_token` is refused for a token send (the device's own
    ///   APNs token is not an activity's, and Apple refuses it for the topic) and for a condition send; a topic send
    ///   goes out as one broadcast on the topic's channel (`update`, `end`, when the project broadcasts and the topic
    ///   has a channel at the send), or to its members' activity tokens (`update`, `end`) or push-to-start tokens
    ///   (`start`), and then `attributes-type` must be a type's name (``LiveActivityScope/isValidAttributesType(_:)``;
    ///   docs/server.md, *Live Activities*).
    /// - Then, as Apple documents the ActivityKit payload: `apns-priority` 5 or 10; `aps.timestamp` an integer (seconds
    ///   since 1970); `aps.event` `start`, `update` or `end`; `aps.content-state` an object, required for `start` and
    ///   `update`; `start` requires `attributes-type` (a string), `attributes` (an object) and an alert
    ///   (`aps.alert`, or the message's `notification`, which becomes it); `stale-date` and `dismissal-date`
    ///   integers; `relevance-score` a number; `apns.payload` at most 4,096 bytes.
    ///
    /// Numbers are read as ``JSONValue`` holds them, never converted: an integer past `Int64` or a fraction is
    /// refused, not trapped on.
    ///
    /// - Throws: `LedgerCoreError.invalidArgument` naming the field (`message.apns.payload.aps.timestamp`).
    static func validate(_ message: [String: JSONValue], target: MessageTarget) throws(LedgerCoreError) {
        guard let apnsValue = message["apns"], let apns = apnsValue.object else { return }
        let token = PlatformValidation.field(apnsValue, "live_activity_token")
        let declared = header("apns-push-type", in: apns)
        let isTokenSend: Bool
        if case .token = target { isTokenSend = true } else { isTokenSend = false }
        if let token {
            guard isTokenSend else {
                throw LedgerCoreError(
                    .invalidArgument, field: tokenField,
                    "live_activity_token is for a message to one registration token (message.token), not to a topic or a condition"
                )
            }
            let text = token.string ?? ""
            guard (try? APNsDeviceToken(hex: text, sandbox: false)) != nil else {
                throw LedgerCoreError(
                    .invalidArgument, field: tokenField,
                    "live_activity_token must be an ActivityKit push token or push-to-start token in hex: an even"
                        + " number of hex digits, \(2 * APNsDeviceToken.byteRange.lowerBound) to"
                        + " \(2 * APNsDeviceToken.byteRange.upperBound)")
            }
            if let declared, declared.value.string != pushType {
                throw LedgerCoreError(
                    .invalidArgument, field: "message.apns.headers.\(declared.name)",
                    "apns-push-type must be liveactivity (or left out) in a message with a live_activity_token")
            }
        } else if let declared, declared.value.string == pushType {
            if isTokenSend {
                throw LedgerCoreError(
                    .invalidArgument, field: tokenField,
                    "a liveactivity push needs apns.live_activity_token, the activity's push token or a push-to-start"
                        + " token: the device's own APNs token cannot receive it")
            }
            if case .condition = target {
                throw LedgerCoreError(
                    .invalidArgument, field: "message.apns.headers.\(declared.name)",
                    "liveactivity sends to a condition are not supported: send to a topic, or to each device's token"
                        + " (message.token) with apns.live_activity_token")
            }
        } else {
            return
        }
        if let priority = header("apns-priority", in: apns), let value = priority.value.string,
            !priorities.contains(value)
        {
            throw LedgerCoreError(
                .invalidArgument, field: "message.apns.headers.\(priority.name)",
                "apns-priority must be \"5\" or \"10\" for a Live Activity")
        }
        try checkPayload(
            apns["payload"]?.object, hasNotification: message["notification"]?.object != nil,
            requiresTypeName: token == nil)
        // ActivityKit's payload is at most 4 KB, as every APNs payload (the send route checks the payload as pushed,
        // with the keys the iOS mapping adds: MessageRoutes.checkAPNsPayloadSize).
        if let payload = apns["payload"], case let size = payload.json.count, size > maximumPayloadBytes {
            throw LedgerCoreError(
                .invalidArgument, field: "message.apns.payload",
                "the Live Activity's payload is \(size) bytes; an ActivityKit push holds at most \(maximumPayloadBytes)"
            )
        }
    }

    /// The most an ActivityKit push's payload holds, in bytes (APNs' 413 `PayloadTooLarge` past it).
    public static let maximumPayloadBytes = 4096

    /// - Parameter requiresTypeName: a topic send's start, pushed to the push-to-start tokens registered for its
    ///   `attributes-type`: the type must have a name such a token can be registered for.
    private static func checkPayload(
        _ payload: [String: JSONValue]?, hasNotification: Bool, requiresTypeName: Bool
    ) throws(LedgerCoreError) {
        let path = "message.apns.payload.aps"
        guard let aps = payload?["aps"]?.object else {
            throw LedgerCoreError(
                .invalidArgument, field: path,
                "a Live Activity message needs apns.payload.aps with timestamp, event and content-state")
        }
        func refuse(_ key: String, _ text: String) -> LedgerCoreError {
            LedgerCoreError(.invalidArgument, field: "\(path).\(key)", text)
        }
        guard let timestamp = aps["timestamp"] else {
            throw refuse("timestamp", "timestamp is required: the time of the update, in seconds since 1970")
        }
        guard isTime(timestamp) else {
            throw refuse("timestamp", "timestamp must be a non-negative integer: seconds since 1970")
        }
        guard let event = aps["event"] else { throw refuse("event", "event is required: start, update or end") }
        guard let name = event.string, events.contains(name) else {
            throw refuse("event", "event must be start, update or end")
        }
        if let state = aps["content-state"] {
            guard state.object != nil else {
                throw refuse("content-state", "content-state must be an object (the activity's ContentState)")
            }
        } else if name != "end" {
            throw refuse("content-state", "content-state is required for \(name): the activity's ContentState")
        }
        for key in ["stale-date", "dismissal-date"] {
            if let value = aps[key], !isTime(value) {
                throw refuse(key, "\(key) must be a non-negative integer: seconds since 1970")
            }
        }
        if let score = aps["relevance-score"] {
            switch score {
            case .integer, .unsigned, .number: break
            default: throw refuse("relevance-score", "relevance-score must be a number")
            }
        }
        guard name == "start" else { return }
        guard let type = aps["attributes-type"] else {
            throw refuse("attributes-type", "attributes-type is required to start a Live Activity")
        }
        guard let typeName = type.string, !typeName.isEmpty else {
            throw refuse("attributes-type", "attributes-type must be the name of the ActivityAttributes type")
        }
        if requiresTypeName, !LiveActivityScope.isValidAttributesType(typeName) {
            throw refuse(
                "attributes-type",
                "attributes-type must be the name of the ActivityAttributes type: 1 to"
                    + " \(LiveActivityScope.maximumAttributesTypeBytes) letters, digits, _ and .")
        }
        guard let attributes = aps["attributes"] else {
            throw refuse("attributes", "attributes is required to start a Live Activity")
        }
        guard attributes.object != nil else { throw refuse("attributes", "attributes must be an object") }
        guard aps["alert"] != nil || hasNotification else {
            throw refuse("alert", "an alert is required to start a Live Activity (aps.alert, or message.notification)")
        }
    }

    /// The ActivityKit event of a stored message (`apns.payload.aps.event`: `start`, `update`, `end`) and, for a
    /// start, its `attributes-type`; `nil` when it has none.
    static func event(of message: [String: JSONValue]) -> (name: String, attributesType: String?)? {
        guard let aps = message["apns"]?.object?["payload"]?.object?["aps"]?.object,
            let name = aps["event"]?.string
        else { return nil }
        return (name, aps["attributes-type"]?.string)
    }

    /// A time as Apple's ActivityKit payload holds one: a non-negative integer number of seconds since 1970.
    private static func isTime(_ value: JSONValue) -> Bool {
        guard let seconds = value.integer else { return false }
        return seconds >= 0
    }

    /// A header of an `apns` object by its lowercased name (HTTP header names are case-insensitive), with the name
    /// as given. Validation refuses two names that differ only in case; in a stored message that holds them anyway
    /// (`ledger import`), the first in byte order is read, in every process alike.
    static func header(_ lowercasedName: String, in apns: [String: JSONValue]) -> (name: String, value: JSONValue)? {
        guard let headers = apns["headers"]?.object else { return nil }
        return headers.filter { $0.key.lowercased() == lowercasedName }.min { $0.key < $1.key }
            .map { ($0.key, $0.value) }
    }
}

/// Where the APNs push of a stored message goes, for a recipient that held an APNs token at the send: the pusher
/// and the audits decide it the same way (``init(message:target:)``).
public enum APNsDestination: Sendable, Equatable {
    /// The device's own APNs token, under the app's bundle id: every message but a Live Activity's.
    case device
    /// A Live Activity's token (`apns.live_activity_token`), under `<bundle id>.push-type.liveactivity`, in the
    /// environment (production or sandbox) of the device's own APNs token.
    case liveActivity(token: [UInt8])
    /// Each recipient's activity token for the topic it follows (a topic send whose event is `update` or `end`), under
    /// `<bundle id>.push-type.liveactivity`, in the environment of the device's own APNs token: a recipient that does
    /// not follow the topic's Live Activity at the send is passed.
    case topicFollowers(topic: TopicName)
    /// Each recipient's push-to-start token for the ActivityAttributes type (a topic send whose event is `start`),
    /// likewise; a recipient without one is passed.
    case pushToStart(attributesType: String)
    /// Nowhere: a stored message that asks for a Live Activity push without one to make (no valid activity token,
    /// or a condition send). Validation refuses such messages; `ledger import` does not validate. Its device's own
    /// token would be refused for the topic, and a `DeviceTokenNotForTopic` would clear it.
    case none
    /// The topic's iOS 18 broadcast channel: a topic send of an `update` or `end` that the ledger recorded as a
    /// broadcast (the project broadcasts and the topic had a channel at the send: `Sent.broadcast_channel_id`) is one
    /// broadcast on the channel, never a push per device.
    case channel

    /// - Parameters:
    ///   - message: the stored message, parsed (``DevicePayload/object(ofMessageJSON:)``).
    ///   - broadcastChannel: the channel the ledger recorded the send on (`Sent.broadcast_channel_id`), if any. Whether
    ///     a topic's Live Activity send is a broadcast is decided when it is sent, from the ledger then, and recorded
    ///     with it: never again from today's channels, so a send replays as it went out.
    public init(message: [String: JSONValue], target: MessageTarget, broadcastChannel: String? = nil) {
        guard LiveActivityMessage.isRequested(by: message) else {
            self = .device
            return
        }
        let declared = message["apns"]?.object.flatMap { LiveActivityMessage.header("apns-push-type", in: $0) }
        if case .token = target, let token = LiveActivityMessage.activityToken(of: message),
            declared.map({ $0.value.string == LiveActivityMessage.pushType }) ?? true
        {
            self = .liveActivity(token: token)
        } else if case .topic(let topic) = target, LiveActivityMessage.activityToken(of: message) == nil,
            declared?.value.string == LiveActivityMessage.pushType,
            let event = LiveActivityMessage.event(of: message)
        {
            if event.name == "start" {
                // Apple's broadcasts update and end activities; a start goes to each push-to-start token.
                if let type = event.attributesType, LiveActivityScope.isValidAttributesType(type) {
                    self = .pushToStart(attributesType: type)
                } else {
                    self = .none
                }
            } else if broadcastChannel != nil {
                self = .channel
            } else {
                self = .topicFollowers(topic: topic)
            }
        } else {
            self = .none
        }
    }

    /// The token a recipient that held `held` at the send is pushed to; `nil` for ``none`` and ``channel`` (a
    /// broadcast reaches whoever holds the channel, not a token), and for a topic's Live Activity, whose token is each
    /// recipient's own (``token(holding:activityToken:)``).
    public func token(holding held: APNsDeviceToken) -> APNsDeviceToken? {
        switch self {
        case .device: return held
        case .liveActivity(let token): return try? APNsDeviceToken(bytes: token, sandbox: held.sandbox)
        case .topicFollowers, .pushToStart, .none, .channel: return nil
        }
    }

    /// The token a recipient that held `held` at the send, and `activityToken` for the topic or type then, is pushed to:
    /// the activity token in the device's environment for a topic's Live Activity (`nil` without one), as
    /// ``token(holding:)`` otherwise.
    public func token(holding held: APNsDeviceToken, activityToken: APNsDeviceToken?) -> APNsDeviceToken? {
        switch self {
        case .topicFollowers, .pushToStart:
            return activityToken.flatMap { try? APNsDeviceToken(bytes: $0.bytes, sandbox: held.sandbox) }
        case .device, .liveActivity, .none, .channel:
            return token(holding: held)
        }
    }

    /// Where a stored send's pushes go, from what the ledger recorded with it (`SentMessage`): a topic's Live Activity
    /// send by its recorded `topicActivity` (kept when the content is forgotten) and `broadcastChannel`; every other
    /// send as ``init(message:target:broadcastChannel:)`` reads its message.
    ///
    /// A topic's Live Activity send recorded before layout 13 has no `topicActivity`: layout 12's builds accepted one
    /// only as a broadcast on the topic's channel (they refused it otherwise), and it is read as that,
    /// ``channel``, whether or not it recorded the channel (the pusher then takes the topic's channel from before the
    /// send, as those builds did).
    public init(
        message: [String: JSONValue], target: MessageTarget, broadcastChannel: String?,
        topicActivity: TopicActivityDelivery?
    ) {
        guard case .topic(let topic) = target else {
            self.init(message: message, target: target, broadcastChannel: broadcastChannel)
            return
        }
        switch topicActivity {
        case .followers?: self = broadcastChannel != nil ? .channel : .topicFollowers(topic: topic)
        case .pushToStart(let type)?: self = .pushToStart(attributesType: type)
        case .nowhere?: self = .none
        case nil:
            let declared = message["apns"]?.object.flatMap { LiveActivityMessage.header("apns-push-type", in: $0) }
            if declared?.value.string == LiveActivityMessage.pushType,
                message["apns"].flatMap({ PlatformValidation.field($0, "live_activity_token") }) == nil
            {
                self = .channel
            } else {
                self.init(message: message, target: target, broadcastChannel: broadcastChannel)
            }
        }
    }

    /// What the ledger records with a topic's Live Activity send (`Sent.topic_activity`): `nil` for any other
    /// destination.
    public var topicActivity: TopicActivityDelivery? {
        switch self {
        case .topicFollowers, .channel: .followers
        case .pushToStart(let type): .pushToStart(attributesType: type)
        case .device, .liveActivity, .none: nil
        }
    }

    /// Whether the push goes to a Live Activity.
    public var isLiveActivity: Bool {
        switch self {
        case .liveActivity, .topicFollowers, .pushToStart: return true
        case .device, .none, .channel: return false
        }
    }

    /// Whether the message ends its topic's Live Activity (a topic send whose event is `end`): its followers'
    /// activity tokens are retired when it is sent (unless the ledger sends it as a broadcast, which reaches the
    /// channel's activities and not the followers': the writer checks that with the send).
    public static func endsTopicActivity(_ message: [String: JSONValue], target: MessageTarget) -> TopicName? {
        guard case .topicFollowers(let topic) = APNsDestination(message: message, target: target),
            LiveActivityMessage.event(of: message)?.name == "end"
        else { return nil }
        return topic
    }
}
