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
    private let configuration: ServerConfiguration
    private let logger: Logger

    public init(configuration: ServerConfiguration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
    }

    /// The ledger of `project`, which must be one the server serves.
    public func ledger(for project: ProjectID) throws -> Ledger {
        lock.lock()
        defer { lock.unlock() }
        if let ledger = ledgers[project] { return ledger }
        var options = Ledger.Options()
        options.limits = configuration.limits
        let ledger = try Ledger.open(
            dataDirectory: configuration.dataDirectory, project: project, options: options, logger: logger)
        ledgers[project] = ledger
        return ledger
    }

    /// Finishes queued writes of every ledger.
    public func closeAll() {
        lock.lock()
        defer { lock.unlock() }
        for ledger in ledgers.values { ledger.close() }
        ledgers.removeAll()
    }
}
