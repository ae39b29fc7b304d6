import LedgerCore
import LedgerStore

/// How `ledger serve` runs.
public struct ServerConfiguration: Sendable {
    public var host = "127.0.0.1"
    public var port = 8080
    public var dataDirectory = "./ledger-data"
    /// The rule conditions of new sends are evaluated with (stored in each `sent` event).
    public var precedence: ConditionPrecedence = .leftToRight
    public var credentials: CredentialStore
    /// True when no config file was given: dev credentials, loud warning.
    public var isDevelopment: Bool
    /// Request bodies larger than this are refused with 413.
    public var maximumBodyBytes = 1 << 20
    /// Tokens one Instance ID batch may name (FCM: 1000).
    public var maximumBatchTokens = 1000
    /// Limits the store enforces (topics per instance).
    public var limits = LedgerLimits()
    /// Subscription changes per second per project, counted per token (FCM: 3000). A single change over the
    /// rate gets 429 RESOURCE_EXHAUSTED with Retry-After; in a batch, the tokens beyond the budget do.
    public var subscriptionChangesPerSecond = 3000
    /// Sends per minute per project (FCM's default quota: 600,000). Over it: 429 QUOTA_EXCEEDED.
    public var sendsPerMinute = 600_000
    /// The clock of the rate limits, in seconds (tests inject one).
    public var rateClock: @Sendable () -> Double = RateLimiter.monotonicSeconds

    public init(credentials: CredentialStore, isDevelopment: Bool) {
        self.credentials = credentials
        self.isDevelopment = isDevelopment
    }

    /// Dev mode: project `demo-project` with the dev credentials.
    public static var development: ServerConfiguration {
        ServerConfiguration(credentials: .development, isDevelopment: true)
    }
}
