import LedgerCore

import Foundation

/// The platform a device registered with: it decides the shape of what the device receives.
public enum DevicePlatform: String, Sendable, CaseIterable {
    case ios, android, web

    /// The platform of a registration; a device registered without one (or with one this build does not
    /// know) gets the iOS shape, as every device did before platforms were told apart (SPEC §4.4).
    public init(registered platform: String?) {
        self = platform.flatMap { DevicePlatform(rawValue: $0.lowercased()) } ?? .ios
    }
}

/// What a device receives for a delivered message, mapped from the stored message for its platform the way
/// FCM maps a v1 message (docs/server.md, "What a device receives"):
///
/// - **iOS** — the dictionary an app gets in `didReceiveRemoteNotification`: `data` keys and every
///   `apns.payload` key but `aps` at the top level (`apns.payload` wins), `aps` = `apns.payload.aps` with
///   `alert` from `notification` when `apns.payload.aps` has none, `fcm_options.image` from
///   `apns.fcm_options.image` or `notification.image`, `gcm.message_id`, `from`.
/// - **Android** — what `RemoteMessage` exposes: `data` (`android.data` replaces `data` when given),
///   `notification` (`title`, `body`, `image` of `notification`, overridden by every `android.notification`
///   field, in lowerCamelCase), `collapseKey`, `priority`, `ttl` (seconds), `messageId`, `from`.
/// - **Web** — the JavaScript SDK's `MessagePayload`: `data` (`webpush.data` replaces `data` when given),
///   `notification` (`notification`'s fields overridden by `webpush.notification`'s), `fcmOptions.link`,
///   `collapseKey` (the Web Push `Topic` header), `messageId`, `from`.
///
/// Besides the payload: the delivery's ``collapseKey`` (`apns-collapse-id`, `android.collapse_key`, the
/// `Topic` header — a newer undelivered message with the same key replaces an older one in a device's
/// inbox), its ``priority`` and, for iOS, its APNs ``pushType``.
///
/// A pure function of the stored message, so what a device gets is what the log says. The message comes
/// from the log and is read defensively: a stored message that is not an object maps to the fixed keys,
/// values of the wrong type are left out, and the keys the mapping writes are written last, so no key of
/// the message can replace or fake them (``MessageValidation`` refuses such keys in the first place).
public struct DevicePayload: Equatable, Sendable {
    /// The top-level keys an iOS payload's mapping owns.
    public static let ownedKeys: Set<String> = ["gcm.message_id", "from", "aps", "fcm_options"]

    public enum Priority: String, Sendable {
        case high, normal
    }

    public let platform: DevicePlatform
    /// The payload: always a JSON object.
    public let payload: JSONValue
    /// Messages with the same key replace each other while undelivered.
    public let collapseKey: String?
    public let priority: Priority
    /// The APNs push type (`alert`, `background`, `liveactivity`, …), iOS only.
    public let pushType: String?
    /// Where an iOS recipient's APNs push goes: its own APNs token, or a Live Activity's (``APNsDestination``);
    /// ``APNsDestination/device`` for the other platforms.
    public let apnsDestination: APNsDestination

    /// The stored message as the mappings read it (``object(ofMessageJSON:)``): parsed once per send, not per
    /// platform. `destination` is where the ledger says the send's APNs pushes go (``SentMessage/apnsDestination``,
    /// from what it recorded with the send); without it, as the message says (``APNsDestination/init(message:target:)``).
    public init(
        ofObject message: [String: JSONValue], messageID: UInt64, target: MessageTarget, project: ProjectID,
        platform: DevicePlatform, destination: APNsDestination? = nil
    ) {
        let from: String
        if case .topic(let topic) = target {
            from = "/topics/\(topic.rawValue)"
        } else {
            from = project.rawValue
        }
        self.platform = platform
        let mapped: Mapped
        switch platform {
        case .ios:
            mapped = Self.ios(message, messageID: messageID, from: from, target: target, destination: destination)
        case .android: mapped = Self.android(message, messageID: messageID, from: from)
        case .web: mapped = Self.web(message, messageID: messageID, from: from)
        }
        payload = .object(mapped.payload)
        collapseKey = mapped.collapseKey
        priority = mapped.priority
        pushType = mapped.pushType
        apnsDestination = mapped.apnsDestination
    }

    public init(
        ofMessageJSON messageJSON: [UInt8], messageID: UInt64, target: MessageTarget, project: ProjectID,
        platform: DevicePlatform = .ios, destination: APNsDestination? = nil
    ) {
        self.init(
            ofObject: Self.object(ofMessageJSON: messageJSON), messageID: messageID, target: target,
            project: project, platform: platform, destination: destination)
    }

    /// A stored message as the mappings read it: empty for anything but a JSON object (a damaged event).
    public static func object(ofMessageJSON messageJSON: [UInt8]) -> [String: JSONValue] {
        (try? JSONValue(parsing: messageJSON))?.object ?? [:]
    }

    /// The payload as JSON (UTF-8, keys sorted by code point).
    ///
    /// Written by ``JSONValue/json``, not `JSONSerialization`: the latter's sorted keys compare through ICU,
    /// 25 times slower here, and rendering payloads was most of the server's CPU when devices replayed their
    /// backlogs.
    public var json: [UInt8] { payload.json }

    // MARK: The mappings

    private struct Mapped {
        var payload: [String: JSONValue]
        var collapseKey: String?
        var priority: Priority
        var pushType: String?
        var apnsDestination: APNsDestination = .device
    }

    private static func ios(
        _ message: [String: JSONValue], messageID: UInt64, from: String, target: MessageTarget,
        destination: APNsDestination?
    ) -> Mapped {
        var top = strings(message["data"])
        let apns = message["apns"]?.object ?? [:]
        let apnsPayload = apns["payload"]?.object ?? [:]
        for (key, value) in apnsPayload where key != "aps" { top[key] = value }
        var aps = apnsPayload["aps"]?.object ?? [:]
        let notification = message["notification"]?.object
        if let notification, aps["alert"] == nil {
            // An empty alert for a notification with only an image, as FCM sends it.
            aps["alert"] = .object(
                notification.filter { ["title", "body"].contains($0.key) && $0.value.string != nil })
        }
        let image = options(apns)?["image"]?.string ?? notification?["image"]?.string
        top["fcm_options"] = image.map { .object(["image": .string($0)]) }
        top["aps"] = aps.isEmpty ? nil : .object(aps)
        top["gcm.message_id"] = .string(String(messageID))
        top["from"] = .string(from)

        let headers = headerValues(apns["headers"])
        let hasAlert = aps["alert"] != nil || aps["sound"] != nil || aps["badge"] != nil
        let silent = !hasAlert && aps["content-available"] != nil
        // FCM's Live Activity messages need no header: `live_activity_token` makes the push a `liveactivity` one.
        let liveActivity = LiveActivityMessage.isRequested(by: message)
        let pushType =
            headers["apns-push-type"] ?? (liveActivity ? LiveActivityMessage.pushType : silent ? "background" : "alert")
        let priority: Priority
        switch headers["apns-priority"] {
        case "10"?: priority = .high
        case "5"?, "1"?: priority = .normal
        default: priority = pushType == "background" ? .normal : .high
        }
        return Mapped(
            payload: top, collapseKey: headers["apns-collapse-id"], priority: priority, pushType: pushType,
            apnsDestination: destination ?? APNsDestination(message: message, target: target))
    }

    private static func android(_ message: [String: JSONValue], messageID: UInt64, from: String) -> Mapped {
        let android = message["android"]?.object ?? [:]
        var top: [String: JSONValue] = [:]
        top["data"] = .object(strings(android["data"] ?? message["data"]))
        var notification = commonNotification(message)
        for (key, value) in android["notification"]?.object ?? [:] { notification[lowerCamelCase(key)] = value }
        top["notification"] = notification.isEmpty ? nil : .object(notification)
        let collapseKey = field(android, "collapse_key")?.string
        top["collapseKey"] = collapseKey.map(JSONValue.string)
        let priority =
            field(android, "priority")?.string.flatMap { Priority(rawValue: $0.lowercased()) }
            ?? (notification.isEmpty ? .normal : .high)
        top["priority"] = .string(priority.rawValue)
        let ttl = field(android, "ttl")?.string.flatMap(MessageLifetimeBounds.microseconds(ofDuration:))
        top["ttl"] = .integer((ttl ?? MessageLifetimeBounds.maximumSeconds * 1_000_000) / 1_000_000)
        top["messageId"] = .string(String(messageID))
        top["from"] = .string(from)
        return Mapped(payload: top, collapseKey: collapseKey, priority: priority, pushType: nil)
    }

    private static func web(_ message: [String: JSONValue], messageID: UInt64, from: String) -> Mapped {
        let webpush = message["webpush"]?.object ?? [:]
        var top: [String: JSONValue] = [:]
        let data = strings(webpush["data"] ?? message["data"])
        top["data"] = data.isEmpty ? nil : .object(data)
        var notification = commonNotification(message)
        for (key, value) in webpush["notification"]?.object ?? [:] { notification[key] = value }
        top["notification"] = notification.isEmpty ? nil : .object(notification)
        if let link = options(webpush)?["link"]?.string { top["fcmOptions"] = .object(["link": .string(link)]) }
        let headers = headerValues(webpush["headers"])
        top["collapseKey"] = headers["topic"].map(JSONValue.string)
        top["messageId"] = .string(String(messageID))
        top["from"] = .string(from)
        let priority: Priority = headers["urgency"]?.lowercased() == "high" ? .high : .normal
        return Mapped(payload: top, collapseKey: headers["topic"], priority: priority, pushType: nil)
    }

    // MARK: Helpers

    /// The string members of an object (a damaged stored message may hold others; they are left out).
    private static func strings(_ value: JSONValue?) -> [String: JSONValue] {
        (value?.object ?? [:]).filter { $0.value.string != nil }
    }

    /// `title`, `body` and `image` of the message's `notification`.
    private static func commonNotification(_ message: [String: JSONValue]) -> [String: JSONValue] {
        (message["notification"]?.object ?? [:]).filter {
            ["title", "body", "image"].contains($0.key) && $0.value.string != nil
        }
    }

    /// A field by its proto name or its lowerCamelCase JSON name (both are accepted).
    private static func field(_ object: [String: JSONValue], _ snakeCase: String) -> JSONValue? {
        object[snakeCase] ?? object[lowerCamelCase(snakeCase)]
    }

    private static func options(_ config: [String: JSONValue]) -> [String: JSONValue]? {
        field(config, "fcm_options")?.object
    }

    /// Header names lowercased (HTTP headers are case-insensitive), string values only.
    private static func headerValues(_ value: JSONValue?) -> [String: String] {
        var headers: [String: String] = [:]
        // In byte order, the first of names that differ only in case kept (as ``LiveActivityMessage`` reads them).
        for (name, value) in (value?.object ?? [:]).sorted(by: { $0.key < $1.key }) {
            if let text = value.string, headers[name.lowercased()] == nil { headers[name.lowercased()] = text }
        }
        return headers
    }

    /// `click_action` → `clickAction`; a name without underscores is returned as it is.
    static func lowerCamelCase(_ name: String) -> String {
        guard name.contains("_") else { return name }
        let parts = name.split(separator: "_", omittingEmptySubsequences: true)
        guard let first = parts.first else { return name }
        return String(first) + parts.dropFirst().map { $0.prefix(1).uppercased() + $0.dropFirst() }.joined()
    }
}
