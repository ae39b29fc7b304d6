/// A page of the project's broadcast channels, by topic name (`GET /v1/projects/{p}/liveActivityChannels`).
public struct LiveActivityChannelPage: Encodable {
    public let liveActivityChannels: [LiveActivityChannelResource]
    /// The last topic of this page, when more follow: the next page starts after it.
    public let nextPageToken: String?

    public init(liveActivityChannels: [LiveActivityChannelResource], nextPageToken: String?) {
        self.liveActivityChannels = liveActivityChannels
        self.nextPageToken = nextPageToken
    }
}
