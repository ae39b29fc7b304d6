import Foundation
import Synchronization
import LedgerCore
import LedgerStore
import Logging
import LedgerQueries
import LedgerCluster

/// What the server keeps per project beside its routes: the open ledgers and their devices' wake-ups
/// (``OpenLedgers``), the checkpoint signers, the APNs pushers' reports, the devices heard from, and this node's
/// part in a cluster.
///
/// - Note: Thread-safe.
public final class LedgerRegistry: Sendable {
    private struct State {
        var signers: [ProjectID: CheckpointSigner] = [:]
        /// Why a project's checkpoint signer could not be made, when the last try failed.
        var signerProblems: [ProjectID: String] = [:]
        /// Each pushing project's APNs state, as its pusher last reported it.
        var apnsStates: [ProjectID: APNsState] = [:]
        /// Each project's witnesses, made with its signer (projects with `witnesses` configured only).
        var witnesses: [ProjectID: CheckpointWitnesses] = [:]
        /// This node's cosigner key, in a cluster (``nodeCosigner(name:)``).
        var nodeCosigner: Cosigner?
        /// The last checkpoint of each project this node led that its replicas cosigned: the size it was signed
        /// at, and the note with their lines.
        var replicaCosigned: [ProjectID: (size: UInt64, note: String)] = [:]
    }

    private let state = Mutex(State())
    /// Each served project's open ledger.
    public let opened: OpenLedgers
    /// Opens checkpoint keys and signs checkpoints (file I/O) off the cooperative pool.
    private let signing = SerialWorker<BlockingJob, Void>(name: "ledger-checkpoints")
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
                if state.withLock({ $0.signerProblems[project] != nil }) {
                    problems.append("a project cannot sign checkpoints: its signing key cannot be used")
                }
                if let problem = witnessProblem(project) { problems.append(problem) }
                if let problem = state.withLock({ $0.apnsStates[project]?.problem }) {
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

    /// The checkpoint signer of `project` (its key made on first use: ``CheckpointKeeper``).
    ///
    /// A key that cannot be used (readable by others, not a signing key, another name) is logged once, with
    /// its path, and is the project's readiness problem until a later try succeeds.
    ///
    /// - Throws: `StoreError`, whose message may name the key's path: not for clients.
    func checkpoints(for project: ProjectID) async throws -> CheckpointSigner {
        if let signer = state.withLock({ $0.signers[project] }) { return signer }
        return try await signing.perform { [self] in try makeSigner(project) }
    }

    /// Opens `project`'s checkpoint key (on the signing worker's thread), or records why it cannot be used.
    private func makeSigner(_ project: ProjectID) throws -> CheckpointSigner {
        if let signer = state.withLock({ $0.signers[project] }) { return signer }
        do {
            let signer = CheckpointSigner(
                keeper: try CheckpointKeeper.open(
                    dataDirectory: configuration.dataDirectory, project: project,
                    settings: configuration.checkpoints[project] ?? CheckpointSettings()))
            state.withLock { state in
                state.signers[project] = signer
                state.signerProblems.removeValue(forKey: project)
            }
            return signer
        } catch let error as StoreError {
            let previous = state.withLock { $0.signerProblems.updateValue(error.message, forKey: project) }
            if previous != error.message {
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

    /// The witnesses of `project`, made on first use with its signer's keeper; nil when it has none configured.
    ///
    /// - Throws: `StoreError` when its kept cosigned checkpoints cannot be read.
    func witnesses(for project: ProjectID, signer: CheckpointSigner) throws -> CheckpointWitnesses? {
        guard let requirement = configuration.witnesses[project] else { return nil }
        return try state.withLock { state in
            if let witnesses = state.witnesses[project] { return witnesses }
            let witnesses = try CheckpointWitnesses(
                requirement: requirement, keeper: signer.keeper, logger: logger)
            state.witnesses[project] = witnesses
            return witnesses
        }
    }

    /// This node's cosigner key (`<data>/node-cosigner.key`, made on first use, mode 0600) under `name`: what
    /// it cosigns its projects' checkpoints with, as a replica (``ReplicaCosigning``).
    ///
    /// - Throws: `StoreError` when the key file cannot be made or read.
    func nodeCosigner(name: String) throws -> Cosigner {
        if let cosigner = state.withLock({ $0.nodeCosigner }) { return cosigner }
        let cosigner = try CosignerKeyFile.open(
            (configuration.dataDirectory as NSString).appendingPathComponent("node-cosigner.key"), name: name)
        state.withLock { $0.nodeCosigner = cosigner }
        return cosigner
    }

    /// `signed` with its replicas' cosignatures (``ReplicaCosigning/collect(_:project:server:)``), collected once
    /// per checkpoint signed.
    func replicaCosigned(
        _ signed: (checkpoint: Checkpoint, note: String), of project: ProjectID, server: ServerContext
    ) async -> (checkpoint: Checkpoint, note: String) {
        if let last = state.withLock({ $0.replicaCosigned[project] }), last.size == signed.checkpoint.size,
            let note = try? SignedNote(parsing: last.note), note.body == (try? SignedNote(parsing: signed.note))?.body
        {
            return (signed.checkpoint, last.note)
        }
        guard let note = try? SignedNote(parsing: signed.note) else { return signed }
        let lines = await ReplicaCosigning.collect(note, project: project, server: server)
        let cosigned = note.adding(lines).text
        state.withLock { $0.replicaCosigned[project] = (signed.checkpoint.size, cosigned) }
        return (signed.checkpoint, cosigned)
    }

    /// What the witnesses of each project that has them last answered.
    func witnessReports() -> [ProjectID: CheckpointWitnesses.Report] {
        state.withLock { $0.witnesses.mapValues { $0.report.withLock { $0 } } }
    }

    /// Why `project`'s last checkpoint missed its witnesses' quorum (which witness, and why), without naming the
    /// project; nil when it did not.
    private func witnessProblem(_ project: ProjectID) -> String? {
        guard let witnesses = state.withLock({ $0.witnesses[project] }) else { return nil }
        let report = witnesses.report.withLock { $0 }
        guard report.quorumMissing else { return nil }
        let failing = report.statuses.compactMap { status in status.problem.map { "\(status.name): \($0)" } }
        return "a project's checkpoint lacks its witnesses' quorum (\(witnesses.requirement.quorum) of "
            + "\(witnesses.requirement.witnesses.count)): " + failing.joined(separator: "; ")
    }

    /// Keeps a cosigned checkpoint (``CheckpointKeeper/keepCosigned(size:note:)``: an fsync), on the signing
    /// worker.
    func keepCosigned(size: UInt64, note: String, by keeper: CheckpointKeeper) async throws {
        try await signing.perform { try keeper.keepCosigned(size: size, note: note) }
    }

    /// The consistency proof of `ledger`'s log from `old` to `new` events, on the signing worker.
    func consistencyProof(of ledger: Ledger, from old: UInt64, to new: UInt64) async throws -> [[UInt8]] {
        try await signing.perform {
            try ledger.read { try $0.merkleTree(size: new).consistencyProof(from: old) }
        }
    }

    /// What a project's APNs pusher reports: why APNs refuses it or does not answer (`nil`: neither), whether
    /// APNs has not answered for ``ProjectPusher/silenceLimit``, and the pushes it owes.
    struct APNsState: Sendable {
        var problem: String?
        var outboxDepth: Int
        var notAnswering = false
    }

    /// What `project`'s APNs pusher last reported, or `nil` (it has none).
    func apnsState(of project: ProjectID) -> APNsState? { state.withLock { $0.apnsStates[project] } }

    func reportAPNs(_ report: APNsState, for project: ProjectID) {
        state.withLock { $0.apnsStates[project] = report }
    }

    /// The pushes owed over every project, and how many projects APNs refuses.
    func apnsTotals() -> (outboxDepth: Int, failingProjects: Int) {
        state.withLock { state in
            (
                state.apnsStates.values.reduce(0) { $0 + $1.outboxDepth },
                state.apnsStates.values.filter { $0.problem != nil }.count
            )
        }
    }

    /// `signer`'s latest checkpoint of `ledger` (``CheckpointSigner/latest(of:)``), on the signing worker: a new
    /// one appends its note to the kept list and syncs the file, which is no work for the cooperative pool.
    func latestCheckpoint(of ledger: Ledger, signedBy signer: CheckpointSigner) async throws -> (
        checkpoint: Checkpoint, note: String
    ) {
        try await signing.perform { try signer.latest(of: ledger) }
    }

    /// Signs a last checkpoint of every open ledger whose log grew since its last one (the server's
    /// shutdown: the kept checkpoints then end at the final head). Failures are logged, not thrown: a
    /// stopping server still closes its ledgers.
    public func signFinalCheckpoints() async {
        // In a cluster, checkpoints are the leader's to sign, and this node has handed its leaderships on.
        guard cluster == nil else { return }
        for (project, ledger) in openLedgers() {
            do {
                let signer = try await checkpoints(for: project)
                try await signing.perform { try signer.signIfGrown(ledger) }
            } catch {
                logger.error(
                    "could not sign the shutdown checkpoint",
                    metadata: ["ledger.project": "\(project)", "error": "\(error)"])
            }
        }
    }
}
