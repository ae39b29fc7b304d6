import Foundation
import LedgerCore
import LedgerStore
import Logging
import LedgerQueries
import LedgerCluster

/// What the server keeps per project beside its routes: the open ledgers and their devices' wake-ups
/// (``OpenLedgers``), the devices heard from, and this node's part in a cluster. What is not the registry's has
/// a room of its own, which it hands out: checkpoint signing (``CheckpointSigners``), witnessing
/// (``ProjectWitnesses``), cosigning by the replicas in a cluster (``ReplicaCosignatures``), and the APNs
/// pushers' reports (``APNsReports``).
///
/// - Note: Thread-safe.
public final class LedgerRegistry: Sendable {
    /// Each served project's open ledger.
    public let opened: OpenLedgers
    /// Each project's checkpoint signer, and the worker that writes the checkpoint files.
    let signers: CheckpointSigners
    /// Each project's witnesses, for projects with `witnesses` configured.
    let witnesses: ProjectWitnesses
    /// This node's cosigner key and its replicas' cosignatures, in a cluster.
    let cosignatures: ReplicaCosignatures
    /// What each pushing project's APNs pusher last reported.
    let apns = APNsReports()
    /// Each pushing project's provider token and broadcast channel client, shared by its pusher and its routes.
    let apnsProviders: APNsProviders
    /// Runs maintenance that reads or writes a whole ledger (expiry sweeps) off the cooperative pool.
    private let maintenance = SerialWorker<BlockingJob, Void>(name: "ledger-maintenance")
    /// The devices heard from since the last expiry sweep (``RegistrationExpirySweeper``).
    let activity = ActivityTracker()
    private let configuration: ServerConfiguration
    let logger: Logger
    /// The metrics every ledger's group commits are reported to.
    public let metrics: ServerMetrics

    /// This node's part in a cluster (``ServerConfiguration/cluster``); `nil` for a node of its own.
    public let cluster: ClusterNode?
    /// The requests this node forwards to another, in a cluster (a service of `ledger serve`).
    let forwards: ForwardWatch?

    /// Made in the order each part needs the one before: in a cluster, the gates (``ReplicaGates``), then the
    /// ledgers opened with them (``OpenLedgers``), then the node given both (``ClusterNode``).
    ///
    /// - Throws: ``EtcdError`` when the cluster's configuration cannot be used.
    public init(configuration: ServerConfiguration, logger: Logger, metrics: ServerMetrics = ServerMetrics()) throws {
        self.configuration = configuration
        self.logger = logger
        self.metrics = metrics
        apnsProviders = APNsProviders(configuration: configuration)
        signers = CheckpointSigners(configuration: configuration, logger: logger)
        witnesses = ProjectWitnesses(requirements: configuration.witnesses, signers: signers, logger: logger)
        cosignatures = ReplicaCosignatures(dataDirectory: configuration.dataDirectory, signers: signers)
        let gates = configuration.cluster.map(ReplicaGates.init)
        opened = OpenLedgers(configuration: configuration, logger: logger, metrics: metrics, gates: gates)
        if let cluster = configuration.cluster, let gates {
            self.cluster = try ClusterNode(
                configuration: cluster, projects: configuration.credentials.projects, gates: gates, host: opened,
                logger: logger)
        } else {
            cluster = nil
        }
        forwards = cluster.map { ForwardWatch(cluster: $0) }
    }

    /// The ledger of `project`, which must be one the server serves (``OpenLedgers/ledger(for:)``).
    ///
    /// - Throws: `StoreError`.
    public func ledger(for project: ProjectID) async throws -> Ledger { try await opened.ledger(for: project) }

    /// What delivery shares across `project`'s devices (``OpenLedgers/delivery(for:)``).
    func delivery(for project: ProjectID) -> DeliveryState { opened.delivery(for: project) }

    /// The ledgers opened so far.
    public func openLedgers() -> [ProjectID: Ledger] { opened.openLedgers() }

    /// Finishes queued writes of every ledger, and closes them.
    public func closeAll() { opened.closeAll() }

    /// Runs `body` on the maintenance worker's thread.
    func onWorker<Value: Sendable>(_ body: @escaping @Sendable () throws -> Value) async throws -> Value {
        try await maintenance.perform(body)
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
    public func readinessProblems(_ projects: Set<ProjectID>) async -> [String] {
        var problems: [String] = []
        for project in projects.sorted(by: { $0.rawValue < $1.rawValue }) {
            do {
                let ledger = try await self.ledger(for: project)
                if let problem = ledger.writeProblem { problems.append("a project cannot be written: \(problem)") }
                if ledger.compactionProblem != nil {
                    // The error names files: it is in the log, not here.
                    problems.append(
                        "a project's file could not be compacted after an erasure: freed pages may still hold what was"
                            + " erased (the server log says why; it is tried again before the next write)")
                }
                if ledger.erasureJournalProblem != nil {
                    problems.append(
                        "a project's erasures are not all in erasures.jsonl: a restore of an older backup would not"
                            + " apply them again (the server log says why; it is tried again before the next write)")
                }
                if signers.hasProblem(project) {
                    problems.append("a project cannot sign checkpoints: its signing key cannot be used")
                }
                if let problem = witnesses.problem(of: project) { problems.append(problem) }
                if let problem = apns.state(of: project)?.problem {
                    problems.append("a project cannot push to APNs: \(problem)")
                }
                if let problem = apns.state(of: project)?.broadcastProblem {
                    problems.append("a project's broadcasts fail at APNs: \(problem)")
                }
            } catch let error as StoreError {
                problems.append("a project cannot be served: \(Self.reason(error))")
            } catch {
                problems.append("a project cannot be served")
            }
        }
        return problems
    }

    /// Checks the checkpoint key of every served project that has one already (a key is made on first use
    /// otherwise): `ledger serve` refuses to start with a key that others can read or that is not a signing
    /// key of the configured name, as it does for every other fault of its configuration.
    ///
    /// - Throws: `StoreError` `.invalidArgument` or `.unavailable`, naming the key file.
    public func checkCheckpointKeys() throws {
        try signers.checkKeys(of: configuration.credentials.projects)
    }

    /// Signs a last checkpoint of every open ledger whose log grew since its last one (the server's
    /// shutdown: the kept checkpoints then end at the final head). Failures are logged, not thrown: a
    /// stopping server still closes its ledgers.
    public func signFinalCheckpoints() async {
        // In a cluster, checkpoints are the leader's to sign, and this node has handed its leaderships on.
        guard cluster == nil else { return }
        await signers.signFinalCheckpoints(of: openLedgers())
    }
}
