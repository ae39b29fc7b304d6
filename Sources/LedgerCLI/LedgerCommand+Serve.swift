import ArgumentParser
import Hummingbird
import LedgerCore
import LedgerServer
import LedgerCluster
import Logging
import LedgerStore

extension LedgerCommand {
    /// `ledger serve`: the FCM-compatible HTTP server.
    struct Serve: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Run the FCM-compatible HTTP server (dev mode with the dev credentials when no --config is given).")

        @Option(help: "Data directory holding one ledger per project.")
        var data: String = "./ledger-data"

        @Option(help: "Address to bind.")
        var host: String = "127.0.0.1"

        @Option(help: "Port to listen on (0 picks a free one).")
        var port: Int = 8080

        @Option(help: "Credentials file (JSON, keys as SHA-256 hashes); see docs/server.md.")
        var config: String?

        @Flag(help: "Serve dev mode (no --config: published credentials) on an address other than loopback anyway.")
        var allowDevModeOnNetwork = false

        @Option(
            name: .customLong("condition-precedence"),
            help: "Rule for conditions: left-to-right (FCM, the default) or standard. Overrides the config file.")
        var conditionPrecedence: ConditionPrecedence?

        @Option(
            name: .customLong("subscription-rate"),
            help: "Subscription changes per second per project (default 3000). Overrides the config file.")
        var subscriptionRate: Int?

        @Option(
            name: .customLong("registration-rate"),
            help: "Device registrations per second per project (default 100). Overrides the config file.")
        var registrationRate: Int?

        @Option(
            name: .customLong("send-quota"),
            help: "Sends per minute per project (default 600000). Overrides the config file.")
        var sendQuota: Int?

        @Option(
            name: .customLong("max-topics"),
            help: "Topics one instance may hold (default 2000). Overrides the config file.")
        var maxTopics: Int?

        @Option(
            name: .customLong("max-body-bytes"),
            help: "Largest request body accepted (default 1048576). Overrides the config file.")
        var maxBodyBytes: Int?

        @Option(
            name: .customLong("max-connections"),
            help: ArgumentHelp(
                "Connections held open at once; one more is closed as it arrives (default 10000). Lowered, with a"
                    + " warning, to what the limit on open files leaves room for. Overrides the config file."))
        var maxConnections: Int?

        @Option(
            name: .customLong("tls-cert"),
            help: ArgumentHelp(
                "PEM certificate chain to serve HTTPS with (HTTP/2 by ALPN beside HTTP/1.1); with --tls-key."
                    + " Read again on SIGHUP. Overrides the config file's tls."))
        var tlsCert: String?

        @Option(name: .customLong("tls-key"), help: "PEM private key of --tls-cert (mode 600 or 640).")
        var tlsKey: String?

        @Option(
            name: .customLong("node-id"),
            help: "This node's id in a cluster (docs/cluster.md). Overrides the config file's cluster.nodeId.")
        var nodeID: String?

        @Option(
            name: .customLong("etcd"),
            help: ArgumentHelp(
                "etcd endpoints (host:port, comma-separated) of a cluster. Overrides the config file's"
                    + " cluster.etcdEndpoints; with --node-id and --advertise-url, makes this node one of a cluster."))
        var etcd: String?

        @Option(
            name: .customLong("advertise-url"),
            help:
                "Where the other nodes of a cluster reach this one (http://host:port). Overrides cluster.advertiseURL.")
        var advertiseURL: String?

        func validate() throws {
            guard (tlsCert == nil) == (tlsKey == nil) else {
                throw ValidationError("--tls-cert and --tls-key go together")
            }
            guard (0...65535).contains(port) else { throw ValidationError("--port must be 0…65535") }
            for (name, value) in [
                ("--subscription-rate", subscriptionRate), ("--send-quota", sendQuota), ("--max-topics", maxTopics),
                ("--registration-rate", registrationRate),
                ("--max-body-bytes", maxBodyBytes), ("--max-connections", maxConnections),
            ] where (value ?? 1) < 1 {
                throw ValidationError("\(name) must be at least 1")
            }
        }

        /// The configuration: the file's (or dev mode's), then the flags given on the command line.
        func configuration() throws -> ServerConfiguration {
            var configuration: ServerConfiguration
            if let config {
                do {
                    configuration = try ServerConfiguration.load(path: config)
                } catch {
                    throw InputError("\(error)")
                }
            } else {
                guard Self.isLoopback(host) || allowDevModeOnNetwork else {
                    throw InputError(
                        "dev mode (no --config) serves the published credentials (Bearer owner); it binds only a"
                            + " loopback address, not \(host). Give --config with your own keys, or"
                            + " --allow-dev-mode-on-network if you really mean it.")
                }
                configuration = .development
            }
            configuration.host = host
            configuration.port = port
            configuration.dataDirectory = data
            if let conditionPrecedence { configuration.precedence = conditionPrecedence }
            if let subscriptionRate { configuration.subscriptionChangesPerSecond = subscriptionRate }
            if let registrationRate { configuration.registrationsPerSecond = registrationRate }
            if let sendQuota { configuration.sendsPerMinute = sendQuota }
            if let maxTopics { configuration.limits.maximumTopicsPerInstance = maxTopics }
            if let maxBodyBytes { configuration.maximumBodyBytes = maxBodyBytes }
            if let maxConnections { configuration.connections.maximumConnections = maxConnections }
            if let tlsCert, let tlsKey { configuration.tlsFiles = (tlsCert, tlsKey) }
            if nodeID != nil || etcd != nil || advertiseURL != nil || configuration.cluster != nil {
                var cluster =
                    configuration.cluster ?? ClusterConfiguration(nodeID: "", advertiseURL: "", etcdEndpoints: [])
                if let nodeID { cluster.nodeID = nodeID }
                if let advertiseURL { cluster.advertiseURL = advertiseURL }
                if let etcd {
                    cluster.etcdEndpoints = etcd.split(separator: ",").map { String($0.filter { $0 != " " }) }
                }
                if let problem = cluster.problem { throw InputError(problem) }
                configuration.cluster = cluster
            }
            if let files = configuration.tlsFiles {
                do {
                    configuration.certificate = try ServerCertificate(
                        certificatePath: files.certificate, keyPath: files.key)
                } catch {
                    throw InputError("\(error)")
                }
            }
            return configuration
        }

        /// Whether `host` names only this machine (127.0.0.0/8, ::1, localhost).
        static func isLoopback(_ host: String) -> Bool {
            host == "localhost" || host == "::1" || host == "[::1]"
                || (host.hasPrefix("127.") && host.split(separator: ".").count == 4)
        }

        func run() async throws {
            // swift-log's stream handler (standard error, as without a bootstrap), formatting a logger's
            // metadata only when it logs: Hummingbird sets a request id on every request's logger.
            LoggingSystem.bootstrap { label in
                DeferredMetadataLogHandler(wrapping: StreamLogHandler.standardError(label: label))
            }
            var logger = Logger(label: "ledger")
            logger.logLevel = .info
            var configuration = try configuration()
            configuration.connections.fitOpenFiles(
                reserve: FileDescriptorLimit.reserve(projects: configuration.credentials.projects.count),
                logger: logger)
            let ledgers: LedgerRegistry
            do {
                ledgers = try LedgerRegistry(configuration: configuration, logger: logger)
                try ledgers.checkCheckpointKeys()
                try configuration.loadAPNsCredentials()
            } catch {
                throw InputError("\(error)")
            }
            if configuration.isDevelopment {
                printNow(
                    """
                    ************************************************************************
                    DEV MODE: no --config given. Project demo-project, data in \(data).
                      admin:   Authorization: Bearer owner
                      auditor: Authorization: Bearer auditor
                      client:  x-goog-api-key: dev-client-key
                    Do not expose this server: anyone who reads this can use it.
                    ************************************************************************
                    """)
            }
            try await withThrowingDiscardingTaskGroup { group in
                if let cluster = ledgers.cluster {
                    // The connections to etcd live as long as the node; the membership is claimed before the
                    // server answers anything, and a live holder of this node's id or URL stops it here.
                    group.addTask { try await cluster.runConnections() }
                    do {
                        try await cluster.join()
                    } catch {
                        throw InputError("\(error)")
                    }
                }
                try await serve(configuration: configuration, ledgers: ledgers, logger: logger)
                group.cancelAll()
            }
        }

        /// Announces the server and runs it until it is stopped.
        private func serve(configuration: ServerConfiguration, ledgers: LedgerRegistry, logger: Logger) async throws {
            printNow(
                "TopicLedger: serving \(configuration.isDevelopment ? "demo-project (dev mode)" : "\(configuration.credentials.projects.count) project(s)") on \(configuration.certificate == nil ? "http" : "https")://\(host):\(port) — data in \(data)"
            )
            // The ledgers are opened, checkpointed and closed by the application's ``LedgerLifecycle``; this
            // closes them too when the application fails to start.
            defer { ledgers.closeAll() }
            let app = buildApplication(configuration: configuration, ledgers: ledgers, logger: logger)
            try await app.runService()
        }
    }
}
