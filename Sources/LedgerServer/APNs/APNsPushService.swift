import Logging
import ServiceLifecycle
import LedgerCore

/// `ledger serve`'s APNs provider: one ``ProjectPusher`` per project with `apns` settings, run until the
/// server stops gracefully (pushes under way then end as `interrupted` and are owed to the next start).
struct APNsPushService: Service {
    let configuration: ServerConfiguration
    let ledgers: LedgerRegistry
    let logger: Logger

    func run() async throws {
        var pushers: [ProjectPusher] = []
        for (project, settings) in configuration.apns.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            do {
                pushers.append(
                    try ProjectPusher(
                        project: project, settings: settings,
                        contentRetention: configuration.retention(of: project).content.seconds, ledgers: ledgers,
                        logger: logger))
            } catch {
                // `ledger serve` read the same files at start: they changed since.
                logger.error(
                    "APNs cannot start for a project: \(error)", metadata: ["ledger.project": "\(project)"])
                ledgers.apns.report(.init(problem: "its APNs settings cannot be used", outboxDepth: 0), for: project)
            }
        }
        let started = pushers
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                for pusher in started {
                    group.addTask { await pusher.run() }
                }
            }
        }
        for pusher in pushers { await pusher.shutdown() }
        await ledgers.apnsProviders.shutdown()
    }
}
