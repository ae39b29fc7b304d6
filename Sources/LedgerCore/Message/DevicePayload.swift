import Foundation

/// What an app receives for a delivered message (SPEC §4.4): the dictionary an iOS app gets in
/// `didReceiveRemoteNotification`.
///
/// - the `data` keys at the top level, values as sent;
/// - `gcm.message_id`: the message id;
/// - `from`: `/topics/T` for a topic send, else the project;
/// - `aps.alert.title` / `aps.alert.body` from the notification (an empty `alert` for a notification with
///   only an image), no `aps` without a notification.
///
/// The keys the mapping writes (`gcm.message_id`, `from`, `aps`) can never be overwritten by data:
/// ``MessageValidation`` refuses them as data keys. A pure function of the stored message, so what a
/// device gets is what the log says; the message JSON comes from the log and is read defensively (a
/// stored message that is not an object maps to the fixed keys; data values that are not strings are
/// left out).
public struct DevicePayload: Equatable, Sendable, Encodable {
    /// The keys the mapping owns.
    public static let ownedKeys: Set<String> = ["gcm.message_id", "from", "aps"]

    /// The top-level strings: data keys, `gcm.message_id` and `from`, sorted by key.
    public private(set) var strings: [(key: String, value: String)]
    /// `aps.alert`, when the message has a notification.
    public private(set) var alert: Alert?

    public struct Alert: Equatable, Sendable, Encodable {
        public var title: String?
        public var body: String?
    }

    /// - Parameter message: the stored message, parsed (nil if it is not a JSON object).
    public init(of message: [String: Any]?, messageID: UInt64, target: MessageTarget, project: ProjectID) {
        var strings: [String: String] = [:]
        for (key, value) in message?["data"] as? [String: Any] ?? [:] {
            if let value = value as? String { strings[key] = value }
        }
        strings["gcm.message_id"] = String(messageID)
        if case .topic(let topic) = target {
            strings["from"] = "/topics/\(topic.rawValue)"
        } else {
            strings["from"] = project.rawValue
        }
        strings["aps"] = nil
        self.strings = strings.sorted { $0.key < $1.key }.map { (key: $0.key, value: $0.value) }
        if let notification = message?["notification"] as? [String: Any] {
            alert = Alert(title: notification["title"] as? String, body: notification["body"] as? String)
        }
    }

    public init(ofMessageJSON messageJSON: [UInt8], messageID: UInt64, target: MessageTarget, project: ProjectID) {
        self.init(
            of: (try? JSONSerialization.jsonObject(with: Data(messageJSON))) as? [String: Any], messageID: messageID,
            target: target, project: project)
    }

    /// The payload as JSON (UTF-8, keys sorted by code point).
    ///
    /// Swift's `JSONEncoder`, not `JSONSerialization`: the latter's sorted keys compare through ICU, 25 times
    /// slower here, and rendering payloads was most of the server's CPU when devices replayed their backlogs.
    public var json: [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes, .sortedKeys]
        // Strings and optional strings only: encoding cannot fail.
        return (try? encoder.encode(self)).map(Array.init) ?? Array("{}".utf8)
    }

    public static func == (lhs: DevicePayload, rhs: DevicePayload) -> Bool {
        lhs.alert == rhs.alert && lhs.strings.elementsEqual(rhs.strings, by: { $0 == $1 })
    }

    private struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    private struct APS: Encodable {
        var alert: Alert
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Key.self)
        for (key, value) in strings { try container.encode(value, forKey: Key(stringValue: key)) }
        if let alert { try container.encode(APS(alert: alert), forKey: Key(stringValue: "aps")) }
    }
}
