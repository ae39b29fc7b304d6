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
        var mapUsed = 0.0
        for ledger in ledgers.openLedgers().values {
            events &+= try ledger.readLog { try $0.head().seq }
            pendingAudiences += ledger.pendingAudiences
            if ledger.compactionProblem != nil { compactionsOwed += 1 }
            mapUsed = max(mapUsed, ledger.mapUsedFraction)
        }
        ledgers.metrics.recordEvents(events, pendingAudiences: pendingAudiences)
        ledgers.metrics.recordStorage(
            compactionsOwed: compactionsOwed, mapUsedFraction: mapUsed,
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
        return Response(
            status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: ledgers.metrics.exposition())))
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
    ErasureRoutes(server: server).register(on: router)
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
/// Every connection is counted by the ``ConnectionLimiter`` before TLS or HTTP; every request (an HTTP/1.1
/// request or an HTTP/2 stream) has its body's deadline (``RequestBodyDeadline``).
///
/// - Note: Never logs registration tokens, keys or message payloads: routes carry tokens in their paths, so
///   no request-logging middleware that prints URIs is installed.
public func buildApplication(configuration: ServerConfiguration, ledgers: LedgerRegistry, logger: Logger)
    -> some ApplicationProtocol
{
    let router = buildRouter(configuration: configuration, ledgers: ledgers, logger: logger)
    let limiter = ConnectionLimiter(maximum: configuration.maximumConnections)
    let bodyTimeout = TimeAmount.seconds(Int64(configuration.requestBodyTimeoutSeconds))
    let bodyLimits = RequestBodyDeadline.Limits(
        grace: min(.seconds(10), bodyTimeout), maximum: bodyTimeout,
        minimumBytesPerSecond: configuration.minimumBodyBytesPerSecond)
    let idleTimeout = Duration.seconds(configuration.idleTimeoutSeconds)
    let server: HTTPServerBuilder
    // The ledgers' service first: the last to be told to shut down (``LedgerLifecycle``).
    var services: [any Service] = [
        LedgerLifecycle(ledgers: ledgers), DeliverySweeper(ledgers: ledgers),
        RegistrationExpirySweeper(configuration: configuration, ledgers: ledgers, logger: logger),
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
        let stream = HTTP1Channel.Configuration(
            additionalChannelHandlers: [
                RequestBodyDeadline(limits: bodyLimits, logger: logger), StrictTransportSecurity(),
            ],
            idleTimeout: TimeAmount(idleTimeout))
        let http2 = HTTP2UpgradeChannel.Configuration(idleTimeout: idleTimeout, streamConfiguration: stream)
        server = HTTPServerBuilder { responder in
            LimitedConnections(
                inner: try HTTP2UpgradeChannel(
                    tlsConfiguration: certificate.tlsConfiguration, configuration: http2, responder: responder),
                limiter: limiter, tlsHandshakeTimeout: TimeAmount(idleTimeout))
        }
        services.append(CertificateReloader(certificate: certificate, logger: logger))
    } else {
        let http1 = HTTP1Channel.Configuration(
            additionalChannelHandlers: [RequestBodyDeadline(limits: bodyLimits, logger: logger)],
            idleTimeout: TimeAmount(idleTimeout))
        server = HTTPServerBuilder { responder in
            LimitedConnections(inner: HTTP1Channel(responder: responder, configuration: http1), limiter: limiter)
        }
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
