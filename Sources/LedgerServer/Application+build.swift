import Hummingbird
import HummingbirdCore
import HummingbirdHTTP2
import LedgerCore
import LedgerStore
import Logging
import NIOCore
import ServiceLifecycle
import FCMWire
import LedgerCluster

/// Builds the router: FCM v1 send and topic management, legacy Instance ID, device registration, the audit
/// API, health and Prometheus metrics.
///
/// Separate from ``buildApplication(configuration:ledgers:logger:)`` so tests can drive it without a socket.
/// Every route is registered through the ``TokenPathRouter`` (never on its `router` directly), so that it
/// knows every path that might also match one it serves from its table.
public func buildRouter(
    configuration: ServerConfiguration, ledgers: LedgerRegistry, logger: Logger = Logger(label: "topicledger")
) -> TokenPathRouter {
    buildRouter(configuration: configuration, ledgers: ledgers, logger: logger, connections: nil)
}

/// The router, whose `GET /metrics` also serves the series of `connections` (the server's ``ConnectionLimiter``).
func buildRouter(
    configuration: ServerConfiguration, ledgers: LedgerRegistry, logger: Logger, connections: ConnectionLimiter?
) -> TokenPathRouter {
    let router = TokenPathRouter(router: Router(context: LedgerRequestContext.self))
    let server = ServerContext(configuration: configuration, ledgers: ledgers)
    router.add(middleware: MetricsMiddleware(metrics: ledgers.metrics))
    router.add(middleware: GoogleErrorMiddleware(logger: logger))
    // Liveness: the process answers. Readiness: every configured project can be served.
    router.get("/healthz") { _, _ in try JSONResponse.encoded(HealthStatus(status: "ok", reasons: nil)) }
    router.get("/readyz") { _, _ in
        let problems =
            await ledgers.readinessProblems(configuration.credentials.projects)
            + (ledgers.cluster?.readinessProblems ?? [])
        guard problems.isEmpty else {
            return try JSONResponse.encoded(
                HealthStatus(status: "unavailable", reasons: problems), status: .serviceUnavailable)
        }
        return try JSONResponse.encoded(HealthStatus(status: "ok", reasons: nil))
    }
    ClusterRoutes.register(on: router, server: server)
    router.get("/metrics") { _, _ in
        var events: UInt64 = 0
        var pendingAudiences = 0
        var compactionsOwed = 0
        var erasureJournalsOwed = 0
        var mapUsed = 0.0
        for ledger in ledgers.openLedgers().values {
            events &+= try ledger.readLog { try $0.head().seq }
            pendingAudiences += ledger.pendingAudiences
            if ledger.compactionProblem != nil { compactionsOwed += 1 }
            if ledger.erasureJournalProblem != nil { erasureJournalsOwed += 1 }
            mapUsed = max(mapUsed, try ledger.mapUsedFraction)
        }
        ledgers.metrics.recordEvents(events, pendingAudiences: pendingAudiences)
        ledgers.metrics.recordStorage(
            compactionsOwed: compactionsOwed, erasureJournalsOwed: erasureJournalsOwed, mapUsedFraction: mapUsed,
            disk: FileSystemSpace.sizes(at: configuration.dataDirectory))
        if let cluster = ledgers.cluster {
            let projects = cluster.projects
            ledgers.metrics.recordCluster(
                alarms: cluster.alarms, leading: projects.filter { cluster.isLeading($0) }.count,
                holding: projects.filter { cluster.holds($0) }.count, stalled: cluster.stalledReplicas)
        }
        if !configuration.witnesses.isEmpty {
            ledgers.metrics.recordWitnesses(ledgers.witnesses.reports().values)
        }
        if !configuration.apns.isEmpty {
            let apns = ledgers.apns.totals()
            ledgers.metrics.recordAPNs(outboxDepth: apns.outboxDepth, failingProjects: apns.failingProjects)
        }
        var body = ByteBuffer(bytes: ledgers.metrics.exposition())
        if let connections { body.writeString(connections.exposition()) }
        return Response(
            status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
            body: ResponseBody(byteBuffer: body))
    }
    router.group("/v1/projects/:project")
        .projectRoutes(server, roles: [.admin, .auditor])
        .group(context: ProjectRequestContext.self)
        .get("metrics") { _, context in
            let statistics = try context.ledger.readLog { try $0.statistics() }
            let lag = ledgers.cluster?.lagEvents(of: context.project)
            return Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: ResponseBody(
                    byteBuffer: ByteBuffer(
                        bytes: ServerMetrics.projectExposition(
                            statistics, project: context.project, lagEvents: lag,
                            apns: ledgers.apns.state(of: context.project)))))
        }
    MessageRoutes(server: server).register(on: router)
    TopicSubscriptionRoutes(server: server).register(on: router)
    InstanceIDRoutes(server: server).register(on: router)
    RegistrationRoutes(server: server).register(on: router)
    LiveActivityRoutes(server: server).register(on: router)
    ErasureRoutes(server: server).register(on: router)
    LiveActivityChannelRoutes(server: server).register(on: router)
    AuditRoutes(server: server).register(on: router)
    DeliveryRoutes(server: server).register(on: router)
    ProofRoutes(server: server).register(on: router)
    ConsoleRoutes(server: server).register(on: router)
    return router
}

/// The HTTP server of `ledger serve`: HTTP/1.1 on plain TCP, or — with ``ServerConfiguration/certificate`` —
/// HTTPS with HTTP/2 negotiated by ALPN beside HTTP/1.1, every answer carrying `Strict-Transport-Security`, and
/// the certificate read again on SIGHUP (``CertificateReloader``).
///
/// Every connection is held to ``ServerConfiguration/connections``, by the code `ledger witness` uses too
/// (``HTTPServerBuilder/limited(_:limiter:certificate:logger:)``).
///
/// - Note: Never logs registration tokens, keys or message payloads: routes carry tokens in their paths, so
///   no request-logging middleware that prints URIs is installed.
public func buildApplication(configuration: ServerConfiguration, ledgers: LedgerRegistry, logger: Logger)
    -> some ApplicationProtocol
{
    let limiter = ConnectionLimiter(limits: configuration.connections, logger: logger)
    let router = buildRouter(configuration: configuration, ledgers: ledgers, logger: logger, connections: limiter)
    let server = HTTPServerBuilder.limited(
        configuration.connections, limiter: limiter, certificate: configuration.certificate, logger: logger)
    // The ledgers' service first: the last to be told to shut down (``LedgerLifecycle``).
    var services: [any Service] = [
        LedgerLifecycle(ledgers: ledgers), DeliverySweeper(ledgers: ledgers),
        RegistrationExpirySweeper(configuration: configuration, ledgers: ledgers, logger: logger),
        RetentionSweeper(configuration: configuration, ledgers: ledgers, logger: logger),
    ]
    // After the ledgers' service: its replicas stop (and its lease is revoked, passing its leaderships at once)
    // before the ledgers close.
    if let cluster = ledgers.cluster { services.append(cluster) }
    // Before the HTTP server in the list, so it stops after the server has answered what it was forwarding.
    if let forwards = ledgers.forwards { services.append(forwards) }
    if !configuration.witnesses.isEmpty || ledgers.cluster != nil {
        services.append(WitnessCollector(server: ServerContext(configuration: configuration, ledgers: ledgers)))
    }
    if let certificate = configuration.certificate {
        services.append(CertificateReloader(certificate: certificate, logger: logger))
    }
    if !configuration.apns.isEmpty {
        services.append(APNsPushService(configuration: configuration, ledgers: ledgers, logger: logger))
    }
    return Application(
        router: router,
        server: server,
        configuration: .init(
            address: .hostname(configuration.host, port: configuration.port), serverName: "TopicLedger"),
        services: services,
        onServerRunning: { channel in
            logger.notice(
                "TopicLedger listening",
                metadata: [
                    "ledger.address": "\(channel.localAddress?.description ?? "?")",
                    "ledger.scheme": "\(configuration.certificate == nil ? "http" : "https")",
                ])
        },
        logger: logger)
}
