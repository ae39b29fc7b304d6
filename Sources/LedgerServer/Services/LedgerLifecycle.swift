import ServiceLifecycle

/// The ledgers' lifetime as a service of `ledger serve`: a ledger opens on its project's first request, on the
/// registry's opening worker (``LedgerRegistry``: never on the cooperative pool, and a project nobody asks for
/// gets no directory); at graceful shutdown this service signs the last checkpoints of the open ledgers and
/// closes them (their queued writes finish first).
///
/// It is the first of the application's services, so it is the last to be told to shut down: after the
/// HTTP server has stopped taking requests and the other services have ended.
public struct LedgerLifecycle: Service {
    let ledgers: LedgerRegistry

    public init(ledgers: LedgerRegistry) {
        self.ledgers = ledgers
    }

    public func run() async throws {
        // Always closed, so that queued writes finish; the last checkpoints only when stopped gracefully
        // (`gracefulShutdown()` throws when the service's task is cancelled instead).
        defer { ledgers.closeAll() }
        try await gracefulShutdown()
        // The kept checkpoints end at the final head.
        await ledgers.signFinalCheckpoints()
    }
}
