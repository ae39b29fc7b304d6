import Foundation

/// One delivered message, as the server's delivery envelope carries it (docs/server.md, *What a device
/// receives*): the platform payload — for iOS the `userInfo` dictionary of `didReceiveRemoteNotification` —
/// and the delivery's own fields.
public struct RemoteMessage: Sendable, Hashable, Encodable {
    /// The message id the send was answered with (`projects/{p}/messages/{id}` ends with it).
    public let messageID: String
    /// Where this message is in the device's inbox; acknowledging it acknowledges every message before it.
    public let cursor: String
    public let sentTime: String
    public let expireTime: String
    /// `high` or `normal`.
    public let priority: String
    /// The APNs push type (`alert`, `background`, …) when the message has one.
    public let pushType: String?
    /// `apns-collapse-id`, `android.collapse_key` or the Web Push `Topic`: a newer undelivered message with the
    /// same key replaced an older one.
    public let collapseKey: String?
    /// The platform payload: for iOS `{"aps":{…},"gcm.message_id":…,"from":…,<data keys>}`.
    public let payload: [String: PayloadValue]
    /// The token the message was delivered to: acknowledgements go to it.
    public internal(set) var registrationToken = ""

    /// The keys the iOS payload carries for FCM itself, not for the app.
    private static let reservedKeys: Set = [
        "aps", "from", "gcm.message_id", "fcm_options", "notification",
        "data", "messageId", "collapseKey", "priority", "ttl", "fcmOptions",
    ]

    /// The app's own string keys: `data` (Android and web) or the top-level keys of the iOS payload.
    public var appData: [String: String] {
        if case .object(let data) = payload["data"] { return data.compactMapValues(\.stringValue) }
        return payload.filter { !Self.reservedKeys.contains($0.key) }.compactMapValues(\.stringValue)
    }

    /// The topic or condition the message was sent to (`from`).
    public var from: String? { payload["from"]?.stringValue }

    /// A visible notification's title and body: `aps.alert` on iOS (a string alert is the body),
    /// `notification` on Android and web. `nil` for a silent push.
    public var notification: Notification? {
        if let alert = payload["aps"]?["alert"] {
            if let body = alert.stringValue { return Notification(title: nil, body: body) }
            return Notification(title: alert["title"]?.stringValue, body: alert["body"]?.stringValue)
        }
        if let notification = payload["notification"], notification.objectValue != nil {
            return Notification(title: notification["title"]?.stringValue, body: notification["body"]?.stringValue)
        }
        return nil
    }

    /// `aps.content-available` is 1: a background (silent) push that wakes the app.
    public var isContentAvailable: Bool { payload["aps"]?["content-available"]?.intValue == 1 }

    public struct Notification: Sendable, Hashable {
        public let title: String?
        public let body: String?
    }

    /// One delivery of the server: `{"cursor":…,"messageId":…,"payload":{…},…}`.
    /// Encoded as the server's delivery: `collapseKey`, `cursor`, `expireTime`, `messageId`, `payload`,
    /// `priority`, `pushType`, `sentTime`.
    private enum CodingKeys: String, CodingKey {
        case collapseKey, cursor, expireTime, messageID = "messageId", payload, priority, pushType, sentTime
    }

    init(delivery: PayloadValue) throws {
        guard case .object(let object) = delivery, let cursor = object["cursor"]?.stringValue,
            let messageID = object["messageId"]?.stringValue, case .object(let payload) = object["payload"]
        else { throw MessagingError.unexpectedResponse(status: 200, "a delivery without cursor, messageId or payload") }
        self.cursor = cursor
        self.messageID = messageID
        self.payload = payload
        sentTime = object["sentTime"]?.stringValue ?? ""
        expireTime = object["expireTime"]?.stringValue ?? ""
        priority = object["priority"]?.stringValue ?? "normal"
        pushType = object["pushType"]?.stringValue
        collapseKey = object["collapseKey"]?.stringValue
    }

    init(delivery data: Data) throws {
        try self.init(delivery: try JSONDecoder().decode(PayloadValue.self, from: data))
    }
}
