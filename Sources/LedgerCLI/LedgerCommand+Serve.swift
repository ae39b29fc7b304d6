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
