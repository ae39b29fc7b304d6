import LedgerCore
import Logging
import ServiceLifecycle

/// Opens the served projects' ledgers when the server starts, and at graceful shutdown signs their last
/// checkpoints and closes them (their queued writes finish first): the ledgers' lifetime as a service of
/// `ledger serve`.
///
/// It is the first of the application's services, so it is the last to be told to shut down: after the
/// HTTP server has stopped taking requests and the other services have ended.
public struct LedgerLifecycle: Service {
    let ledgers: LedgerRegistry
    let configuration: ServerConfiguration

    public init(ledgers: LedgerRegistry, configuration: ServerConfiguration) {
        self.ledgers = ledgers
        self.configuration = configuration
    }

    public func run() async throws {
        // Opened ahead of the first request, off the cooperative pool (``LedgerRegistry``). A ledger that
        // cannot be opened is logged by the registry, and tried again when a request needs it.
        for project in configuration.credentials.projects.sorted(by: { $0.rawValue < $1.rawValue }) {
            _ = try? await ledgers.ledger(for: project)
        }
        // Returns at graceful shutdown; throws when the task is cancelled, which ends the service the same way.
        try? await gracefulShutdown()
        // Stopped gracefully: the kept checkpoints end at the final head.
        await ledgers.signFinalCheckpoints()
        ledgers.closeAll()
    }
}
