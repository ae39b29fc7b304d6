import Foundation
import LedgerCore
import LedgerStore
import Logging

/// The open ledger of each served project, opened on first use and closed at shutdown.
///
/// - Note: Thread-safe.
public final class LedgerRegistry: @unchecked Sendable {
    // @unchecked: `ledgers` is only touched with `lock` held.
    private let lock = NSLock()
    private var ledgers: [ProjectID: Ledger] = [:]
    private var deliveries: [ProjectID: DeliveryState] = [:]
    private let configuration: ServerConfiguration
    private let logger: Logger
    /// The metrics every ledger's group commits are reported to.
    public let metrics: ServerMetrics

    public init(configuration: ServerConfiguration, logger: Logger, metrics: ServerMetrics = ServerMetrics()) {
        self.configuration = configuration
        self.logger = logger
        self.metrics = metrics
    }

    /// The ledger of `project`, which must be one the server serves.
    public func ledger(for project: ProjectID) throws -> Ledger {
        lock.lock()
        defer { lock.unlock() }
        if let ledger = ledgers[project] { return ledger }
        var options = Ledger.Options()
        options.limits = configuration.limits
        options.commitObserver = { [metrics] requests, operations, duration in
            metrics.recordCommit(requests: requests, operations: operations, duration: duration)
        }
        let delivery = deliveryLocked(for: project)
        options.sendObserver = { [notifier = delivery.notifier] seqs in notifier.notify(seqs: seqs) }
        let ledger = try Ledger.open(
            dataDirectory: configuration.dataDirectory, project: project, options: options, logger: logger)
        ledgers[project] = ledger
        // Weak: a closed ledger must be released (it holds the project's writer lock).
        delivery.notifier.connect { [weak ledger, sends = delivery.sends] seqs in
            guard let ledger else { throw StoreError(.unavailable, "the ledger is closed") }
            return try ledger.read { snapshot in try seqs.map { try sends.send(at: $0, in: snapshot).audience } }
        }
        return ledger
    }

    /// What delivery shares across `project`'s devices: the wake-up of waiting devices and the prepared
    /// recent sends.
    func delivery(for project: ProjectID) -> DeliveryState {
        lock.lock()
        defer { lock.unlock() }
        return deliveryLocked(for: project)
    }

    private func deliveryLocked(for project: ProjectID) -> DeliveryState {
        if let delivery = deliveries[project] { return delivery }
        let delivery = DeliveryState()
        deliveries[project] = delivery
        return delivery
    }

    /// The ledgers opened so far.
    public func openLedgers() -> [ProjectID: Ledger] {
        lock.lock()
        defer { lock.unlock() }
        return ledgers
    }

    /// Finishes queued writes of every ledger.
    public func closeAll() {
        lock.lock()
        defer { lock.unlock() }
        for ledger in ledgers.values { ledger.close() }
        ledgers.removeAll()
    }
}
