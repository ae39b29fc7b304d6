/// How long a connection may take over its requests, and how many may be open at once: the limits every connection
/// of `ledger serve` and of `ledger witness` is held to (``HTTPServerBuilder/limited(_:limiter:certificate:logger:)``),
/// set by the config file's `limits` for the first and by flags of the same names for the second.
///
/// Each closes what a client with no credential could otherwise hold for good: a connection that never finishes its
/// request head (a slowloris), a body that trickles, and — with enough of either — every connection the process may
/// open. Both caps close a connection as soon as it is accepted (``ConnectionLimiter``).
public struct ConnectionLimits: Sendable, Equatable {
    /// A connection that has not sent a whole request head for this long — since it opened, or since its last
    /// answer — is closed: the header timeout and the idle timeout in one. Long polls and streams are requests in
    /// progress, not idle. (`idleTimeoutSeconds`)
    public var idleTimeoutSeconds: Int
    /// The most a request body may take to arrive, from its head (``RequestBodyDeadline``): a body must also keep
    /// ``minimumBodyBytesPerSecond`` after its first 10 seconds, or its connection is closed.
    /// (`requestBodyTimeoutSeconds`)
    public var requestBodyTimeoutSeconds: Int
    /// The slowest a request body may arrive, averaged from its head: each this many bytes allow one more second
    /// beyond the first 10 (never past ``requestBodyTimeoutSeconds``). (`minRequestBodyBytesPerSecond`)
    public var minimumBodyBytesPerSecond: Int
    /// Connections held open at once; the ones beyond are closed on arrival. Lowered at start to what the process's
    /// limit on open files leaves room for (``fitOpenFiles(reserve:logger:)``). (`maxConnections`)
    public var maximumConnections: Int
    /// Connections one client address holds open at once — an IPv4 address, or the /64 network of an IPv6 one
    /// (what one subscriber is usually given) — the ones beyond are closed on arrival, so that one client cannot
    /// take the whole of ``maximumConnections``. Behind a reverse proxy every connection comes from the proxy's
    /// address: set it to ``maximumConnections`` there and cap clients at the proxy.
    /// (`maxConnectionsPerAddress`)
    public var maximumConnectionsPerAddress: Int

    public init(
        idleTimeoutSeconds: Int = 30, requestBodyTimeoutSeconds: Int = 60, minimumBodyBytesPerSecond: Int = 1024,
        maximumConnections: Int = 10_000, maximumConnectionsPerAddress: Int = 1_000
    ) {
        self.idleTimeoutSeconds = idleTimeoutSeconds
        self.requestBodyTimeoutSeconds = requestBodyTimeoutSeconds
        self.minimumBodyBytesPerSecond = minimumBodyBytesPerSecond
        self.maximumConnections = maximumConnections
        self.maximumConnectionsPerAddress = maximumConnectionsPerAddress
    }

    /// `ledger serve`'s: long polls and streams hold a connection each, and a device behind a carrier's NAT shares
    /// its address with many others, so one address may hold a tenth of the cap.
    public static let server = ConnectionLimits()

    /// `ledger witness`'s, a public service whose clients are logs: a request is one body of at most 64 KiB, sent at
    /// once, and a log needs a few connections, not hundreds.
    public static let witness = ConnectionLimits(
        idleTimeoutSeconds: 10, requestBodyTimeoutSeconds: 10, minimumBodyBytesPerSecond: 1024,
        maximumConnections: 1_024, maximumConnectionsPerAddress: 16)

    /// Each limit's name, as the config file's `limits` and `ledger witness`'s flags (in kebab case) name it.
    static var keys: [(key: String, path: WritableKeyPath<ConnectionLimits, Int>)] {
        [
            ("idleTimeoutSeconds", \.idleTimeoutSeconds),
            ("requestBodyTimeoutSeconds", \.requestBodyTimeoutSeconds),
            ("minRequestBodyBytesPerSecond", \.minimumBodyBytesPerSecond),
            ("maxConnections", \.maximumConnections),
            ("maxConnectionsPerAddress", \.maximumConnectionsPerAddress),
        ]
    }

    /// What is wrong with `value` for the limit named `key` (one of ``keys``), or `nil`: each is a whole number of
    /// at least 1, and a timeout at most a day — `TimeAmount` counts nanoseconds in an `Int64`, and a timeout past a
    /// day is a mistake, not a wish.
    public static func problem(key: String, value: Int) -> String? {
        guard value >= 1 else { return "expected a whole number of at least 1" }
        if key.hasSuffix("TimeoutSeconds") && value > 86_400 { return "expected at most 86400 seconds (a day)" }
        return nil
    }
}
