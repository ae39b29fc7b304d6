import Foundation

/// Where the app's server is and how the library keeps its state.
public struct MessagingConfiguration: Sendable {
    /// The TopicLedger server, e.g. `https://push.example.com`.
    public var serverURL: URL
    /// The project the app belongs to.
    public var projectID: String
    /// The project's client API key (sent as `x-goog-api-key`), the key every installed copy of the app holds.
    public var apiKey: String
    /// The platform the device registers as: it decides the payload shape the server delivers.
    public var platform: Platform
    /// The app's id (bundle id), recorded with the registration.
    public var appID: String?
    /// The file where the token, the topics and the pending topic operations are kept between launches
    /// (written atomically after every change).
    public var storeURL: URL
    /// When `true` (as in FirebaseMessaging), the library registers as soon as it has something to do; when
    /// `false`, nothing is sent until the app asks for ``Messaging/token()``.
    public var isAutoInitEnabled: Bool
    /// How failed topic operations, registrations, acknowledgements and stream connections are retried.
    public var retry: RetryPolicy
    /// How long a long poll waits on the server for a message (at most 60).
    public var pollWaitSeconds: Int
    /// The longest a stream may stay silent before the library reconnects (the server sends a comment every
    /// 15 s).
    public var streamIdleTimeout: TimeInterval
    /// Where completion handlers are called (the main queue, as FirebaseMessaging does).
    public var callbackQueue: DispatchQueue

    public enum Platform: String, Sendable, Codable {
        case ios, android, web
    }

    public init(
        serverURL: URL, projectID: String, apiKey: String, platform: Platform = .ios,
        appID: String? = Bundle.main.bundleIdentifier, storeURL: URL? = nil, isAutoInitEnabled: Bool = true,
        retry: RetryPolicy = .default, pollWaitSeconds: Int = 30, streamIdleTimeout: TimeInterval = 45,
        callbackQueue: DispatchQueue = .main
    ) {
        self.serverURL = serverURL
        self.projectID = projectID
        self.apiKey = apiKey
        self.platform = platform
        self.appID = appID
        self.storeURL = storeURL ?? Self.defaultStoreURL(projectID: projectID)
        self.isAutoInitEnabled = isAutoInitEnabled
        self.retry = retry
        self.pollWaitSeconds = min(max(pollWaitSeconds, 0), 60)
        self.streamIdleTimeout = max(streamIdleTimeout, 1)
        self.callbackQueue = callbackQueue
    }

    /// `Application Support/TopicLedgerMessaging/<project>.json`.
    static func defaultStoreURL(projectID: String) -> URL {
        let base =
            FileManager.default.urls(for: .applicationSupportDirectory, in: .userDomainMask).first
            ?? FileManager.default.temporaryDirectory
        let safe = String(
            projectID.unicodeScalars.map {
                $0.properties.isAlphabetic || ("0"..."9").contains($0) ? Character($0) : "_"
            })
        return base.appendingPathComponent("TopicLedgerMessaging", isDirectory: true)
            .appendingPathComponent("\(safe).json")
    }
}
