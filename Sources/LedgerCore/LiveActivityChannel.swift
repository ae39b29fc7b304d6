/// A topic's iOS 18 broadcast channel, as the fold keeps it: the topic's Live Activity sends go out as one
/// broadcast on it.
public struct LiveActivityChannel: Sendable, Equatable {
    /// The topic the channel carries.
    public var topic: TopicName
    /// Apple's channel id (`apns-channel-id`).
    public var channelID: String
    /// Apple's message storage policy: 0 stores nothing (a broadcast's `apns-expiration` must be 0), 1 stores the
    /// latest broadcast.
    public var messageStoragePolicy: UInt32
    /// The seq of the `liveActivityChannelCreated` event.
    public var createdSeq: UInt64

    public init(topic: TopicName, channelID: String, messageStoragePolicy: UInt32, createdSeq: UInt64) {
        self.topic = topic
        self.channelID = channelID
        self.messageStoragePolicy = messageStoragePolicy
        self.createdSeq = createdSeq
    }
}
