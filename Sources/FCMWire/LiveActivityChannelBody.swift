import Foundation
import LedgerCore

/// `POST /v1/projects/{p}/topics/{topic}:createLiveActivityChannel`: `{"messageStoragePolicy": 0}` (also
/// `message_storage_policy`), Apple's message storage policy of the new channel: 0, Apple stores nothing (a
/// broadcast no device is reachable for is dropped), or 1, Apple stores the latest broadcast. Required: it cannot be
/// changed once Apple has made the channel.
public struct LiveActivityChannelBody: Decodable {
    /// Apple's policies ("Sending channel management requests to APNs": `message-storage-policy`).
    public static let policies: ClosedRange<Int> = 0...1
    public let messageStoragePolicy: Int

    public init(from decoder: any Decoder) throws {
        let body = try decoder.container(keyedBy: BodyKey.self)
        try body.refuseUnknown(["messageStoragePolicy", "message_storage_policy"])
        let keys = [BodyKey(stringValue: "messageStoragePolicy"), BodyKey(stringValue: "message_storage_policy")]
            .filter(body.contains)
        guard let key = keys.first else {
            throw FCMError.invalidArgument(
                "messageStoragePolicy is required: 0 (Apple stores nothing) or 1 (Apple stores the latest broadcast)",
                field: "messageStoragePolicy")
        }
        guard keys.count == 1 else {
            throw FCMError.invalidArgument(
                "give messageStoragePolicy once (not also message_storage_policy)", field: "messageStoragePolicy")
        }
        // A JSON number only (not `true`, a string or a fraction), range-checked: nothing from the body is converted
        // in a way that could trap.
        guard (try? body.decode(Bool.self, forKey: key)) == nil, let value = try? body.decode(Int.self, forKey: key),
            Self.policies.contains(value)
        else {
            throw FCMError.invalidArgument(
                "messageStoragePolicy must be 0 (Apple stores nothing) or 1 (Apple stores the latest broadcast)",
                field: key.stringValue)
        }
        messageStoragePolicy = value
    }
}
