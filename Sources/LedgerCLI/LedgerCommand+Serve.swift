import ArgumentParser
import Hummingbird
import LedgerCore
import LedgerServer
import Logging

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

        @Option(
            name: .customLong("condition-precedence"), help: "Rule for conditions: left-to-right (FCM) or standard.")
        var conditionPrecedence: ConditionPrecedence = .leftToRight

        @Option(name: .customLong("subscription-rate"), help: "Subscription changes per second per project.")
        var subscriptionRate: Int = 3000

        @Option(name: .customLong("send-quota"), help: "Sends per minute per project.")
        var sendQuota: Int = 600_000

        @Option(name: .customLong("max-topics"), help: "Topics one instance may hold.")
        var maxTopics: Int = 2000

        @Option(name: .customLong("max-body-bytes"), help: "Largest request body accepted.")
        var maxBodyBytes: Int = 1 << 20

        func validate() throws {
            guard (0...65535).contains(port) else { throw ValidationError("--port must be 0…65535") }
            for (name, value) in [
                ("--subscription-rate", subscriptionRate), ("--send-quota", sendQuota), ("--max-topics", maxTopics),
                ("--max-body-bytes", maxBodyBytes),
            ] where value < 1 {
                throw ValidationError("\(name) must be at least 1")
            }
        }

        func run() async throws {
            var logger = Logger(label: "ledger")
            logger.logLevel = .info
            var configuration: ServerConfiguration
            if let config {
                do {
                    configuration = ServerConfiguration(
                        credentials: try CredentialStore.load(path: config), isDevelopment: false)
                } catch {
                    throw InputError("\(error)")
                }
            } else {
                configuration = .development
            }
            configuration.host = host
            configuration.port = port
            configuration.dataDirectory = data
            configuration.precedence = conditionPrecedence
            configuration.subscriptionChangesPerSecond = subscriptionRate
            configuration.sendsPerMinute = sendQuota
            configuration.limits.maximumTopicsPerInstance = maxTopics
            configuration.maximumBodyBytes = maxBodyBytes
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
            printNow(
                "TopicLedger: serving \(configuration.isDevelopment ? "demo-project (dev mode)" : "\(configuration.credentials.projects.count) project(s)") on http://\(host):\(port) — data in \(data)"
            )
            let ledgers = LedgerRegistry(configuration: configuration, logger: logger)
            defer { ledgers.closeAll() }
            let app = buildApplication(configuration: configuration, ledgers: ledgers, logger: logger)
            try await app.runService()
        }
    }
}
