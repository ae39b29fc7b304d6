import Hummingbird
import LedgerCore
import LedgerStore
import Logging

/// Everything a route needs: configuration and the per-project ledgers.
struct ServerContext: Sendable {
    let configuration: ServerConfiguration
    let ledgers: LedgerRegistry

    func ledger(for project: ProjectID) throws -> Ledger {
        do {
            return try ledgers.ledger(for: project)
        } catch {
            throw FCMError.unavailable("The ledger of project \(project) cannot be opened: \(error)")
        }
    }

    /// Appends and maps storage failures to 503 UNAVAILABLE (nothing was written).
    func append(_ request: WriteRequest, project: ProjectID) async throws -> WriteReceipt {
        do {
            return try await ledger(for: project).append(request)
        } catch let error as StoreError {
            throw FCMError.unavailable("The request could not be stored; nothing was written. \(error.message)")
        }
    }
}

/// Builds the router: FCM v1 send and topic management, legacy Instance ID, device registration, health.
///
/// Separate from ``buildApplication(configuration:ledgers:logger:)`` so tests can drive it without a socket.
public func buildRouter(configuration: ServerConfiguration, ledgers: LedgerRegistry) -> Router<BasicRequestContext> {
    let router = Router(context: BasicRequestContext.self)
    let server = ServerContext(configuration: configuration, ledgers: ledgers)
    router.get("/healthz") { _, _ in try JSONResponse.make(["status": "ok"]) }
    MessageRoutes(server: server).register(on: router)
    TopicSubscriptionRoutes(server: server).register(on: router)
    InstanceIDRoutes(server: server).register(on: router)
    RegistrationRoutes(server: server).register(on: router)
    return router
}

/// The HTTP server of `ledger serve`.
///
/// - Note: Never logs registration tokens, keys or message payloads: routes carry tokens in their paths, so
///   no request-logging middleware that prints URIs is installed.
public func buildApplication(configuration: ServerConfiguration, ledgers: LedgerRegistry, logger: Logger)
    -> some ApplicationProtocol
{
    let router = buildRouter(configuration: configuration, ledgers: ledgers)
    return Application(
        router: router,
        configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "TopicLedger"),
        onServerRunning: { channel in
            logger.notice(
                "TopicLedger listening",
                metadata: ["ledger.address": "\(channel.localAddress?.description ?? "?")"])
        },
        logger: logger)
}
