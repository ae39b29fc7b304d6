import Foundation
import ServiceLifecycle
import Synchronization
import LedgerCore
import LedgerStore
import LedgerQueries

/// Resumes the expired waiters of every project's ``DeliveryNotifier`` each
/// ``DeliveryNotifier/sweepInterval``: one loop for the server, run beside it as a service.
///
/// It ends at graceful shutdown: the server's polls and streams are woken then (``DeliveryNotifier/wakeAll()``),
/// and no wait outlives them.
public struct DeliverySweeper: Service {
    let ledgers: LedgerRegistry

    public init(ledgers: LedgerRegistry) { self.ledgers = ledgers }

    public func run() async {
        // Returns, never throws, when it is told to shut down: a service that throws ends the whole group at once
        // (the ledgers' service would then not sign its last checkpoints).
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try? await Task.sleep(for: DeliveryNotifier.sweepInterval)
                let now = ContinuousClock.now
                for delivery in ledgers.opened.deliveries() { delivery.notifier.sweep(now: now) }
            }
        }
    }
}
