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

    public init(credentials: CredentialStore, isDevelopment: Bool) {
        self.credentials = credentials
        self.isDevelopment = isDevelopment
    }

    /// Dev mode: project `demo-project` with the dev credentials.
    public static var development: ServerConfiguration {
        ServerConfiguration(credentials: .development, isDevelopment: true)
    }
}
