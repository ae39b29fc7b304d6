import LedgerCore

import Foundation

/// A message accepted for sending: its one target and the message object to store.
public struct ValidatedMessage: Sendable, Equatable {
    public var target: MessageTarget
    /// The message object as accepted, re-serialized with keys in code-point order and `/` unescaped (UTF-8
    /// JSON).
    public var json: [UInt8]
}

/// Validates the `message` object of an FCM HTTP v1 send request (SPEC §4.1).
///
/// Accepts lowerCamelCase and snake_case field names. Rules: exactly one of `token`, `fid`, `topic`,
/// `condition` (`fid` is what firebase-admin 7.7 sends for `Message(fid=…)`, which replaces the deprecated
/// `token`; here both name the instance by its registration token);
/// `data` maps strings to strings and uses no reserved key (`from`, `message_type`, `aps`, `fcm_options`,
/// or anything starting with `google` or `gcm`; `aps` and `fcm_options` because an iOS app gets data keys
/// beside the APNs dictionary); `notification` has title, body, image; `android`, `apns`, `webpush` and
/// `fcm_options` follow the v1 proto types (``PlatformValidation``) and are kept as given; a Live Activity message
/// (`apns.live_activity_token`) follows Apple's ActivityKit rules (``LiveActivityMessage``); the serialized
/// message is at most 4096 bytes.
public enum MessageValidation {
    public static let maximumPayloadBytes = 4096
    static let knownFields: Set<String> = [
        "token", "fid", "topic", "condition", "data", "notification", "android", "apns", "webpush", "fcm_options",
        "fcmOptions", "name",
    ]

    /// - Parameters:
    ///   - message: the `message` object, parsed (``JSONValue/init(parsing:)``).
    ///   - precedence: the rule conditions are checked under.
    /// - Throws: `LedgerCoreError.invalidArgument` naming the field (`message.topic`, `message.data.from`).
    public static func validate(_ message: [String: JSONValue], precedence: ConditionPrecedence)
        throws(LedgerCoreError) -> ValidatedMessage
    {
        for key in message.keys where !knownFields.contains(key) {
            throw LedgerCoreError(.invalidArgument, field: "message.\(key)", "unknown field \"\(key)\" in message")
        }
        let targets = ["token", "fid", "topic", "condition"].filter { message[$0] != nil }
        guard targets.count == 1, let kind = targets.first else {
            throw LedgerCoreError(
                .invalidArgument, field: "message",
                targets.isEmpty
                    ? "message must have exactly one of token, fid, topic or condition; it has none"
                    : "message must have exactly one of token, fid, topic or condition; it has \(targets.joined(separator: ", "))"
            )
        }
        guard let text = message[kind]?.string else {
            throw LedgerCoreError(.invalidArgument, field: "message.\(kind)", "\(kind) must be a string")
        }
        let target: MessageTarget
        switch kind {
        case "token", "fid": target = .token(try RegistrationToken(text, field: "message.\(kind)"))
        case "topic": target = .topic(try TopicName(text, field: "message.topic"))
        default:
            _ = try Condition(parsing: text, precedence: precedence, field: "message.condition")
            target = .condition(text)
        }
        if let data = message["data"] { try checkDataKeys(data, path: "message.data") }
        for field in ["notification", "android", "apns", "webpush", "fcm_options", "fcmOptions"] {
            if let value = message[field], value.object == nil {
                throw LedgerCoreError(.invalidArgument, field: "message.\(field)", "\(field) must be an object")
            }
        }
        if let notification = message["notification"]?.object {
            for (key, value) in notification {
                guard ["title", "body", "image"].contains(key) else {
                    throw LedgerCoreError(
                        .invalidArgument, field: "message.notification.\(key)",
                        "unknown field \"\(key)\" in notification (title, body, image)")
                }
                guard value.string != nil else {
                    throw LedgerCoreError(
                        .invalidArgument, field: "message.notification.\(key)", "\(key) must be a string")
                }
            }
        }
        try PlatformValidation.validate(message)
        try LiveActivityMessage.validate(message, target: target)
        var stored = message
        stored.removeValue(forKey: "name")
        // Written by `JSONValue.json`, not `JSONSerialization`, whose sorted keys compare through ICU: that
        // serialization was 11.7 % of the server's CPU under topic sends (docs/performance.md).
        let json = JSONValue.object(stored).json
        guard json.count <= maximumPayloadBytes else {
            throw LedgerCoreError(
                .invalidArgument, field: "message",
                "message is \(json.count) bytes; at most \(maximumPayloadBytes) are allowed")
        }
        return ValidatedMessage(target: target, json: json)
    }

    /// Checks that `data` maps strings to strings with no reserved key.
    static func checkDataKeys(_ data: JSONValue, path: String) throws(LedgerCoreError) {
        guard let data = data.object else {
            throw LedgerCoreError(.invalidArgument, field: path, "data must be an object of strings")
        }
        for (key, value) in data {
            guard value.string != nil else {
                throw LedgerCoreError(.invalidArgument, field: "\(path).\(key)", "data values must be strings")
            }
            if isReservedDataKey(key) {
                throw LedgerCoreError(.invalidArgument, field: "\(path).\(key)", "data key \"\(key)\" is reserved")
            }
        }
    }

    /// FCM's reserved words (`from`, `message_type`, anything starting with `google` or `gcm`), and the keys
    /// an iOS payload's mapping writes beside the data keys (`aps`, `fcm_options`): a data key of that name
    /// would replace or fake them (``DevicePayload``).
    static func isReservedDataKey(_ key: String) -> Bool {
        let lowered = key.lowercased()
        return lowered == "from" || lowered == "message_type" || lowered == "aps" || lowered == "fcm_options"
            || lowered.hasPrefix("google") || lowered.hasPrefix("gcm")
    }
}
