import Foundation
import LedgerCore
import LedgerStore
import Logging
import LMDBKit

/// The open ledger of each served project, opened on first use and closed at shutdown.
///
/// - Note: Thread-safe.
public final class LedgerRegistry: @unchecked Sendable {
    // @unchecked: `ledgers` is only touched with `lock` held.
    private let lock = NSLock()
    private var ledgers: [ProjectID: Ledger] = [:]
    private var deliveries: [ProjectID: DeliveryState] = [:]
    private var signers: [ProjectID: CheckpointSigner] = [:]
    /// Why a project's checkpoint signer could not be made, when the last try failed.
    private var signerProblems: [ProjectID: String] = [:]
    /// Each pushing project's APNs state, as its pusher last reported it.
    private var apnsStates: [ProjectID: APNsState] = [:]
    /// Projects that could not be opened: why, and when it was last tried (tried again after a second).
    private var refusals: [ProjectID: (error: StoreError, at: ContinuousClock.Instant)] = [:]
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
    ///
    /// A project whose ledger cannot be opened (locked by another process, damaged, unreadable) is refused:
    /// the reason is logged once, loudly, each request gets the same `StoreError` for a second, then opening
    /// is tried again.
    ///
    /// - Throws: `StoreError`.
    public func ledger(for project: ProjectID) throws -> Ledger {
        lock.lock()
        defer { lock.unlock() }
        if let ledger = ledgers[project] { return ledger }
        if let refusal = refusals[project], ContinuousClock.now - refusal.at < .seconds(1) { throw refusal.error }
        do {
            let ledger = try openLocked(project)
            if refusals.removeValue(forKey: project) != nil {
                logger.notice("ledger of project is served again", metadata: ["ledger.project": "\(project)"])
            }
            return ledger
        } catch let error as StoreError {
            if refusals[project]?.error.message != error.message {
                logger.critical(
                    "the ledger of a project cannot be served; its requests get 503 UNAVAILABLE",
                    metadata: ["ledger.project": "\(project)", "error": "\(error)"])
            }
            refusals[project] = (error, .now)
            throw error
        }
    }

    /// Why a project cannot be served, for clients: the kind of problem, no file paths.
    public static func reason(_ error: StoreError) -> String {
        switch error.code.kind {
        case .locked: "its ledger is open for writing by another process"
        case .corrupt: "its ledger is damaged (run `ledger verify`)"
        case .rebuildRequired: "its projections must be rebuilt (run `ledger rebuild`)"
        case .incompatible: "its ledger was written by an incompatible version"
        case .notFound: "its ledger does not exist"
        case .unavailable, .invalidArgument: "its ledger cannot be opened or written"
        }
    }

    /// Why some of `projects` cannot be served now (empty when all can), without naming them: readiness is
    /// unauthenticated and must not reveal which projects exist.
    public func readinessProblems(_ projects: Set<ProjectID>) -> [String] {
        var problems: [String] = []
        for project in projects.sorted(by: { $0.rawValue < $1.rawValue }) {
            do {
                let ledger = try self.ledger(for: project)
                if let problem = ledger.writeProblem { problems.append("a project cannot be written: \(problem)") }
                if lock.withLock({ signerProblems[project] != nil }) {
                    problems.append("a project cannot sign checkpoints: its signing key cannot be used")
                }
                if let problem = lock.withLock({ apnsStates[project]?.problem }) {
                    problems.append("a project cannot push to APNs: \(problem)")
                }
            } catch let error as StoreError {
                problems.append("a project cannot be served: \(Self.reason(error))")
            } catch {
                problems.append("a project cannot be served")
            }
        }
        return problems
    }

    private func openLocked(_ project: ProjectID) throws -> Ledger {
        var options = Ledger.Options()
        options.limits = configuration.limits
        if let initialMapBytes = configuration.initialMapBytes { options.environment.mapSize = initialMapBytes }
        options.commitObserver = { [metrics] requests, operations, duration in
            metrics.recordCommit(requests: requests, operations: operations, duration: duration)
        }
        let delivery = deliveryLocked(for: project)
        options.sendObserver = { [delivery] seqs in delivery.notify(seqs: seqs) }
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
        let delivery = DeliveryState(project: project)
        deliveries[project] = delivery
        return delivery
    }

    /// The checkpoint signer of `project` (its key made on first use: ``CheckpointKeeper``).
    ///
    /// A key that cannot be used (readable by others, not a signing key, another name) is logged once, with
    /// its path, and is the project's readiness problem until a later try succeeds.
    ///
    /// - Throws: `StoreError`, whose message may name the key's path: not for clients.
    func checkpoints(for project: ProjectID) throws -> CheckpointSigner {
        lock.lock()
        defer { lock.unlock() }
        if let signer = signers[project] { return signer }
        do {
            let signer = CheckpointSigner(
                keeper: try CheckpointKeeper.open(
                    dataDirectory: configuration.dataDirectory, project: project,
                    settings: configuration.checkpoints[project] ?? CheckpointSettings()))
            signers[project] = signer
            signerProblems.removeValue(forKey: project)
            return signer
        } catch let error as StoreError {
            if signerProblems.updateValue(error.message, forKey: project) != error.message {
                logger.error(
                    "the checkpoint key of a project cannot be used; its checkpoints get 503 UNAVAILABLE",
                    metadata: ["ledger.project": "\(project)", "error": "\(error)"])
            }
            throw error
        }
    }

    /// Checks the checkpoint key of every served project that has one already (a key is made on first use
    /// otherwise): `ledger serve` refuses to start with a key that others can read or that is not a signing
    /// key of the configured name, as it does for every other fault of its configuration.
    ///
    /// - Throws: `StoreError` `.invalidArgument` or `.unavailable`, naming the key file.
    public func checkCheckpointKeys() throws {
        for project in configuration.credentials.projects.sorted(by: { $0.rawValue < $1.rawValue }) {
            do {
                _ = try CheckpointKeeper.open(
                    dataDirectory: configuration.dataDirectory, project: project,
                    settings: configuration.checkpoints[project] ?? CheckpointSettings(), create: false)
            } catch let error as StoreError where error.code.kind == .notFound {
                continue
            }
        }
    }

    /// The ledgers opened so far.
    /// What a project's APNs pusher reports: why APNs refuses it (`nil`: it does not), and the pushes it owes.
    struct APNsState: Sendable {
        var problem: String?
        var outboxDepth: Int
    }

    func reportAPNs(_ state: APNsState, for project: ProjectID) {
        lock.withLock { apnsStates[project] = state }
    }

    /// The pushes owed over every project, and how many projects APNs refuses.
    func apnsTotals() -> (outboxDepth: Int, failingProjects: Int) {
        lock.withLock {
            (apnsStates.values.reduce(0) { $0 + $1.outboxDepth }, apnsStates.values.filter { $0.problem != nil }.count)
        }
    }

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

    /// Signs a last checkpoint of every open ledger whose log grew since its last one (the server's
    /// shutdown: the kept checkpoints then end at the final head). Failures are logged, not thrown: a
    /// stopping server still closes its ledgers.
    public func signFinalCheckpoints() {
        for (project, ledger) in openLedgers() {
            do {
                try checkpoints(for: project).signIfGrown(ledger)
            } catch {
                logger.error(
                    "could not sign the shutdown checkpoint",
                    metadata: ["ledger.project": "\(project)", "error": "\(error)"])
            }
        }
    }
}
