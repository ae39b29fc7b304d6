import LedgerCore

/// A topic's iOS 18 broadcast channel, as the channel routes answer it:
///
/// ```json
/// {"name": "projects/p/topics/scores/liveActivityChannel", "topic": "scores", "channelId": "dGVzdA==",
///  "messageStoragePolicy": 0, "createTime": "2026-12-06T16:00:00.000000Z", "createSeq": "12"}
/// ```
///
/// `channelId` is what an app starts its activity with (`pushType: .channel(channelId)`); `createSeq` is the seq
/// of the `liveActivityChannelCreated` event, as a decimal string (JSON's int64 form in Google's APIs).
public struct LiveActivityChannelResource: Encodable {
    public let name: String
    public let topic: String
    public let channelId: String
    public let messageStoragePolicy: Int
    public let createTime: String
    public let createSeq: String

    public init(project: ProjectID, channel: LiveActivityChannel, created: LedgerTime) {
        name = "projects/\(project)/topics/\(channel.topic.rawValue)/liveActivityChannel"
        topic = channel.topic.rawValue
        channelId = channel.channelID
        messageStoragePolicy = Int(channel.messageStoragePolicy)
        createTime = created.rfc3339
        createSeq = String(channel.createdSeq)
    }
}
