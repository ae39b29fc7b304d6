import Foundation
import LedgerCore
import LedgerStore
import FCMWire
import LedgerQueries
import LedgerCluster

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
    /// The LMDB map size each ledger is opened with, in bytes (`nil`: LMDBKit's default); it doubles
    /// whenever it fills. Small values let tests exercise map growth through the server.
    public var initialMapBytes: Int?
    /// The timeouts and caps of every connection (the config file's `idleTimeoutSeconds`,
    /// `requestBodyTimeoutSeconds`, `minRequestBodyBytesPerSecond`, `maxConnections` and
    /// `maxConnectionsPerAddress`), as `ledger witness` has them too. `ledger serve` lowers the cap to what the
    /// process's limit on open files leaves room for (``ConnectionLimits/fitOpenFiles(reserve:logger:)``).
    public var connections = ConnectionLimits.server
    /// Subscription changes per second per project, counted per token (FCM: 3000). A single change over the
    /// rate gets 429 RESOURCE_EXHAUSTED with Retry-After; in a batch, the tokens beyond the budget do.
    public var subscriptionChangesPerSecond = 3000
    /// Sends per minute per project (FCM's default quota: 600,000). Over it: 429 QUOTA_EXCEEDED.
    public var sendsPerMinute = 600_000
    /// Device registrations per second per project (burst: one second's worth). Every registration is an
    /// event, and the client key that makes one ships in every app: this bounds how fast anyone can grow the
    /// log through it.
    public var registrationsPerSecond = 100
    /// A device's own subscription changes per minute (calls with the client key on its own registration),
    /// beside the project's budget.
    public var deviceSubscriptionChangesPerMinute = 60
    /// A device's acknowledgements per minute.
    public var deviceAcknowledgementsPerMinute = 600
    /// Where the TLS certificate chain and key are (the config file's `tls`; `ledger serve --tls-cert` and
    /// `--tls-key` override it). `ledger serve` reads them into ``certificate``.
    public var tlsFiles: (certificate: String, key: String)?
    /// The certificate the server speaks HTTPS with (HTTP/2 by ALPN beside HTTP/1.1); `nil`: plain HTTP.
    public var certificate: ServerCertificate?
    /// How each project's checkpoints are signed, where not the defaults (origin, key name, key file).
    public var checkpoints: [ProjectID: CheckpointSettings] = [:]
    /// The witnesses that cosign each project's checkpoints, and their quorum; a project without is served
    /// checkpoints signed by its key alone.
    public var witnesses: [ProjectID: WitnessRequirement] = [:]
    /// The projects that push to Apple devices, and how (``APNsSettings``).
    public var apns: [ProjectID: APNsSettings] = [:]
    /// Each project's `registrationExpiry`, where not FCM's 270 days (``expiry(of:)``).
    var registrationExpiries: [ProjectID: RegistrationExpiry] = [:]

    /// How long `project`'s registrations may stay silent before they expire.
    func expiry(of project: ProjectID) -> RegistrationExpiry { registrationExpiries[project] ?? .fcm }
    /// Each project's `contentRetention` and `identifierRetention`, where given (``retention(of:)``).
    var retentions: [ProjectID: (content: RetentionPeriod, identifiers: RetentionPeriod)] = [:]

    /// How long `project` keeps the contents of sends, and the identifiers of a device whose registration ended.
    func retention(of project: ProjectID) -> (content: RetentionPeriod, identifiers: RetentionPeriod) {
        retentions[project] ?? (.never, .never)
    }
    /// This node's part in a cluster (the config file's `cluster`, completed by `ledger serve --node-id`,
    /// `--etcd` and `--advertise-url`); `nil`: one node, no etcd.
    public var cluster: ClusterConfiguration?
    /// The clock of the rate limits, in seconds (tests inject one).
    public var rateClock: @Sendable () -> Double = monotonicSeconds

    public init(credentials: CredentialStore, isDevelopment: Bool) {
        self.credentials = credentials
        self.isDevelopment = isDevelopment
    }

    /// Dev mode: project `demo-project` with the dev credentials.
    public static var development: ServerConfiguration {
        ServerConfiguration(credentials: .development, isDevelopment: true)
    }
}

extension ServerConfiguration {
    /// The limits a config file may set, with the key each is read from.
    static var limitKeys: [(key: String, path: WritableKeyPath<ServerConfiguration, Int>)] {
        var keys: [(key: String, path: WritableKeyPath<ServerConfiguration, Int>)] = [
            ("topicsPerInstance", \.limits.maximumTopicsPerInstance),
            ("tokensPerBatch", \.maximumBatchTokens),
            ("subscriptionChangesPerSecond", \.subscriptionChangesPerSecond),
            ("sendsPerMinute", \.sendsPerMinute),
            ("maxRequestBodyBytes", \.maximumBodyBytes),
            ("registrationsPerSecond", \.registrationsPerSecond),
            ("deviceSubscriptionChangesPerMinute", \.deviceSubscriptionChangesPerMinute),
            ("deviceAcknowledgementsPerMinute", \.deviceAcknowledgementsPerMinute),
        ]
        // idleTimeoutSeconds, requestBodyTimeoutSeconds, minRequestBodyBytesPerSecond, maxConnections,
        // maxConnectionsPerAddress: the limits `ledger witness` takes as flags.
        let connections: WritableKeyPath<ServerConfiguration, ConnectionLimits> = \.connections
        keys += ConnectionLimits.keys.map { limit in (key: limit.key, path: connections.appending(path: limit.path)) }
        return keys
    }

    /// Reads a config file: credentials per project, and optionally limits and the condition rule.
    ///
    /// ```json
    /// {"conditionPrecedence": "left-to-right",
    ///  "limits": {"topicsPerInstance": 2000, "tokensPerBatch": 1000, "subscriptionChangesPerSecond": 3000,
    ///             "sendsPerMinute": 600000, "maxRequestBodyBytes": 1048576},
    ///  "projects": {"my-project": {"adminKeys": ["sha256:…"], "auditorKeys": ["sha256:…"],
    ///                              "clientApiKeys": ["sha256:…"],
    ///                              "checkpoint": {"origin": "…", "keyName": "…", "keyFile": "/path"},
    ///                              "apns": {"teamId": "…", "keyId": "…", "keyFile": "/path", "topic": "…"},
    ///                              "witnesses": [{"url": "https://…", "verifierKey": "<vkey>"}],
    ///                              "witnessQuorum": 1}}}
    /// ```
    /// Limits left out keep FCM's defaults. Unknown keys are refused, so a misspelt limit is not silently ignored.
    ///
    /// - Throws: `LedgerCoreError.invalidArgument` naming what is wrong in the file.
    public static func load(path: String) throws -> ServerConfiguration {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw LedgerCoreError(.invalidArgument, field: path, "cannot read the config file")
        }
        if let problem = StrictJSON.problem(in: data) {
            throw LedgerCoreError(.invalidArgument, field: path, problem)
        }
        let decoder = JSONDecoder()
        decoder.userInfo[ConfigurationFile.pathKey] = path
        let file: ConfigurationFile
        do {
            file = try decoder.decode(ConfigurationFile.self, from: data)
        } catch let error as LedgerCoreError {
            throw error
        } catch {
            throw LedgerCoreError(.invalidArgument, field: path, "expected {\"projects\": {…}}")
        }
        var configuration = ServerConfiguration(
            credentials: try CredentialStore(projects: file.projects, path: path), isDevelopment: false)
        for (name, section) in file.projects {
            let project = try ProjectID(name, field: "\(path): projects.\(name)")
            if let checkpoint = section.checkpoint {
                do {
                    configuration.checkpoints[project] = try CheckpointSettings(
                        origin: checkpoint.origin, keyName: checkpoint.keyName, keyFile: checkpoint.keyFile)
                } catch {
                    throw LedgerCoreError(
                        .invalidArgument, field: "\(path): projects.\(name).checkpoint", error.message)
                }
            }
            if let apns = section.apns {
                configuration.apns[project] = try APNsSettings(
                    section: apns.values, broadcast: apns.broadcast, field: "\(path): projects.\(name).apns")
            }
            if let expiry = section.registrationExpiry { configuration.registrationExpiries[project] = expiry }
            if section.contentRetention != nil || section.identifierRetention != nil {
                configuration.retentions[project] = (
                    section.contentRetention ?? .never, section.identifierRetention ?? .never
                )
            }
            if let witnesses = section.witnesses {
                configuration.witnesses[project] = try WitnessRequirement(
                    witnesses: witnesses.map(\.witness), quorum: section.witnessQuorum,
                    field: "\(path): projects.\(name).witnesses",
                    quorumField: "\(path): projects.\(name).witnessQuorum")
            } else if section.witnessQuorum != nil {
                throw LedgerCoreError(
                    .invalidArgument, field: "\(path): projects.\(name).witnessQuorum", "given without witnesses")
            }
        }
        if let limits = file.limits {
            try configuration.apply(limits: limits, path: path)
        }
        if let tls = file.tls {
            configuration.tlsFiles = (tls.certificateFile, tls.keyFile)
        }
        if let precedence = file.conditionPrecedence {
            configuration.precedence = precedence
        }
        if let section = file.cluster {
            let cluster = try ClusterConfiguration(section: section, path: path)
            // One secret, one role: a peer key that is also a project's key would let that project's admin (or
            // any app, for a client key) act as a node — download every project's copy, forward as a peer.
            for key in cluster.peerKeys {
                if let place = configuration.credentials.place(ofKey: key) {
                    throw LedgerCoreError(
                        .invalidArgument, field: "\(path): \(place) and cluster.peerKeys",
                        "one key is given in both; a key has one role in one project, and a peer's is its own")
                }
            }
            configuration.cluster = cluster
        }
        return configuration
    }

    /// Reads every project's APNs key and extra roots: what `ledger serve` checks before it serves.
    ///
    /// - Throws: `LedgerCoreError.invalidArgument` naming the key of the first file that cannot be used.
    public func loadAPNsCredentials() throws {
        for (_, settings) in apns.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            try settings.load()
        }
    }

    /// Sets the limits the file gives (`file.limits`, in name order), each a whole number of at least 1.
    private mutating func apply(limits: [(key: String, value: Int?)], path: String) throws {
        let known = Dictionary(uniqueKeysWithValues: Self.limitKeys.map { ($0.key, $0.path) })
        for (key, integer) in limits {
            guard let keyPath = known[key] else {
                throw LedgerCoreError(
                    .invalidArgument, field: "\(path): limits.\(key)",
                    "unknown limit; expected one of \(Self.limitKeys.map(\.key).joined(separator: ", "))")
            }
            guard let integer else {
                throw LedgerCoreError(
                    .invalidArgument, field: "\(path): limits.\(key)", "expected a whole number of at least 1")
            }
            // At least 1, and a timeout at most a day.
            if let problem = ConnectionLimits.problem(key: key, value: integer) {
                throw LedgerCoreError(.invalidArgument, field: "\(path): limits.\(key)", problem)
            }
            self[keyPath: keyPath] = integer
        }
    }
}

extension ClusterConfiguration {
    /// The config file's `cluster` section; what it leaves out is empty until `ledger serve`'s flags fill it.
    init(section: ConfigurationFile.ClusterSection, path: String) throws {
        self.init(
            nodeID: section.nodeID ?? "", advertiseURL: section.advertiseURL ?? "",
            etcdEndpoints: section.etcdEndpoints ?? [])
        if let leaseSeconds = section.leaseSeconds {
            guard Self.leaseSecondsRange.contains(leaseSeconds) else {
                throw LedgerCoreError(.invalidArgument, field: "\(path): cluster.leaseSeconds", "expected 1 to 3600")
            }
            self.leaseSeconds = leaseSeconds
        }
        if let replicas = section.replicas {
            guard Self.replicasRange.contains(replicas) else {
                throw LedgerCoreError(.invalidArgument, field: "\(path): cluster.replicas", "expected 1 to 99")
            }
            self.replicas = replicas
        }
        if let bytes = section.maximumBlockBytes {
            guard Self.blockBytesRange.contains(bytes) else {
                throw LedgerCoreError(
                    .invalidArgument, field: "\(path): cluster.maximumBlockBytes", "expected 65536 to 1310720")
            }
            maximumBlockBytes = bytes
        }
        if let events = section.retainedEvents {
            guard events >= 0 else {
                throw LedgerCoreError(.invalidArgument, field: "\(path): cluster.retainedEvents", "expected 0 or more")
            }
            retainedEvents = UInt64(events)
        }
        if let commitAhead = section.commitAhead { commitsAhead = commitAhead }
        for key in section.peerKeys ?? [] {
            guard CredentialStore.hash(ofKey: key) != nil else {
                throw LedgerCoreError(
                    .invalidArgument, field: "\(path): cluster.peerKeys", "expected sha256:<64 hex digits>")
            }
        }
        peerKeys = (section.peerKeys ?? []).map { $0.lowercased() }
        if let file = section.peerSecretFile {
            if let problem = ConfiguredFile.problem(at: file, kind: .secret) {
                throw LedgerCoreError(.invalidArgument, field: "\(path): cluster.peerSecretFile", problem)
            }
            guard let data = FileManager.default.contents(atPath: file),
                let secret = String(data: data, encoding: .utf8)?.trimmingCharacters(in: .whitespacesAndNewlines),
                !secret.isEmpty
            else {
                throw LedgerCoreError(
                    .invalidArgument, field: "\(path): cluster.peerSecretFile", "\(file): cannot be read, or is empty")
            }
            guard CredentialStore.matches(secret, anyOf: peerKeys) else {
                throw LedgerCoreError(
                    .invalidArgument, field: "\(path): cluster.peerSecretFile",
                    "the secret's sha256 is not one of cluster.peerKeys")
            }
            peerSecret = secret
        }
    }
}
