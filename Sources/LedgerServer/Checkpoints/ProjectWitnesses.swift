import LedgerCore
import LedgerQueries
import Logging
import Synchronization

/// The witnesses of each project that has them configured (``CheckpointWitnesses``), made on first use from the
/// last cosigned checkpoint kept, and what they last answered, for `/readyz` and the metrics.
///
/// - Note: Thread-safe. The kept file is read on the checkpoints' worker before the lock is taken; the lock
///   guards the map alone, and a witnesses' report is read after it is released.
final class ProjectWitnesses: Sendable {
    private let requirements: [ProjectID: WitnessRequirement]
    private let made = Mutex<[ProjectID: CheckpointWitnesses]>([:])
    private let signers: CheckpointSigners
    private let logger: Logger

    init(requirements: [ProjectID: WitnessRequirement], signers: CheckpointSigners, logger: Logger) {
        self.requirements = requirements
        self.signers = signers
        self.logger = logger
    }

    /// The witnesses of `project`, made on first use from what `keeper` kept; nil when it has none configured.
    ///
    /// - Throws: `StoreError` when its kept cosigned checkpoints cannot be read.
    func witnesses(for project: ProjectID, keeper: CheckpointKeeper) async throws -> CheckpointWitnesses? {
        guard let requirement = requirements[project] else { return nil }
        if let witnesses = made.withLock({ $0[project] }) { return witnesses }
        let lastCosigned = try await signers.lastCosigned(by: keeper)
        let witnesses = CheckpointWitnesses(requirement: requirement, lastCosigned: lastCosigned, logger: logger)
        // Two first uses at once: the first made is kept, so the project has one round at a time.
        return made.withLock { made in
            if let first = made[project] { return first }
            made[project] = witnesses
            return witnesses
        }
    }

    /// What the witnesses of each project that has them last answered.
    func reports() -> [ProjectID: CheckpointWitnesses.Report] {
        made.withLock { $0 }.mapValues { $0.report.withLock { $0 } }
    }

    /// Why `project`'s last checkpoint missed its witnesses' quorum (which witness, and why), without naming the
    /// project; nil when it did not.
    func problem(of project: ProjectID) -> String? {
        guard let witnesses = made.withLock({ $0[project] }) else { return nil }
        let report = witnesses.report.withLock { $0 }
        guard report.quorumMissing else { return nil }
        let failing = report.statuses.compactMap { status in status.problem.map { "\(status.name): \($0)" } }
        return "a project's checkpoint lacks its witnesses' quorum (\(witnesses.requirement.quorum) of "
            + "\(witnesses.requirement.witnesses.count)): " + failing.joined(separator: "; ")
    }
}
