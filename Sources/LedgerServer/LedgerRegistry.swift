import Foundation
import Synchronization
import LedgerCore
import LedgerStore
import Logging
import LedgerQueries
import LedgerCluster

/// The open ledger of each served project, opened on first use and closed at shutdown.
///
/// Opening a ledger (LMDB's open, the layout check, the audience recorder's first look) blocks on the disk,
/// so it runs on a ``SerialWorker`` of the registry, never on a thread of Swift's cooperative pool: one
/// project at a time, each opened once.
///
/// - Note: Thread-safe.
public final class LedgerRegistry: Sendable {
    private struct State {
        var ledgers: [ProjectID: Ledger] = [:]
        var deliveries: [ProjectID: DeliveryState] = [:]
        var signers: [ProjectID: CheckpointSigner] = [:]
        /// Why a project's checkpoint signer could not be made, when the last try failed.
        var signerProblems: [ProjectID: String] = [:]
        /// Each pushing project's APNs state, as its pusher last reported it.
        var apnsStates: [ProjectID: APNsState] = [:]
        /// Projects that could not be opened: why, and when it was last tried (tried again after a second).
        var refusals: [ProjectID: (error: StoreError, at: ContinuousClock.Instant)] = [:]

        mutating func delivery(for project: ProjectID) -> DeliveryState {
            if let delivery = deliveries[project] { return delivery }
            let delivery = DeliveryState(project: project)
            deliveries[project] = delivery
            return delivery
        }
    }

    private let state = Mutex(State())
    /// Opens ledgers and makes checkpoint signers (file I/O) off the cooperative pool.
    private let opener = SerialWorker<BlockingJob, Void>(name: "ledger-open")
    /// Runs maintenance that reads or writes a whole ledger (expiry sweeps) off the cooperative pool.
    private let maintenance = SerialWorker<BlockingJob, Void>(name: "ledger-maintenance")
    /// The devices heard from since the last expiry sweep (``RegistrationExpirySweeper``).
    let activity = ActivityTracker()
    private let configuration: ServerConfiguration
    private let logger: Logger
    /// The metrics every ledger's group commits are reported to.
    public let metrics: ServerMetrics

    /// This node's part in a cluster (``ServerConfiguration/cluster``); `nil` for a node of its own.
    public let cluster: ClusterNode?

    public init(
        configuration: ServerConfiguration, logger: Logger, metrics: ServerMetrics = ServerMetrics(),
        cluster: ClusterNode? = nil
    ) {
        self.configuration = configuration
        self.logger = logger
        self.metrics = metrics
        self.cluster = cluster
        cluster?.attach(
            ledgers: { [weak self] project in
                guard let self else { throw StoreError(.unavailable, "the server is stopping") }
                return try await self.ledger(for: project)
            },
            reseed: { [weak self] project, peer, keepAside in
                guard let self, let secret = configuration.cluster?.peerSecret else {
                    throw StoreError(.unavailable, "this node has no cluster.peerSecretFile to ask its peers with")
                }
                let copy = try await ClusterPeers.download(
                    project, from: peer, secret: secret, into: self.snapshotsDirectory)
                try await self.replaceLedger(of: project, with: copy, keepingAside: keepAside)
            })
    }

    /// Runs `body` on the maintenance worker's thread.
    func onWorker<Value: Sendable>(_ body: @escaping @Sendable () throws -> Value) async throws -> Value {
        try await maintenance.perform(body)
    }

    /// The ledger of `project`, which must be one the server serves.
    ///
    /// A project whose ledger cannot be opened (locked by another process, damaged, unreadable) is refused:
    /// the reason is logged once, loudly, each request gets the same `StoreError` for a second, then opening
    /// is tried again.
    ///
    /// - Throws: `StoreError`.
    public func ledger(for project: ProjectID) async throws -> Ledger {
        if let ledger = try openedLedger(project) { return ledger }
        return try await opener.perform { [self] in
            // Another request may have opened it while this one waited for the opener.
            if let ledger = try openedLedger(project) { return ledger }
            return try open(project)
        }
    }

    /// The ledger of `project` when it is open; `nil` when it is to be opened; throws a recent refusal.
    private func openedLedger(_ project: ProjectID) throws -> Ledger? {
        try state.withLock { state in
            if let ledger = state.ledgers[project] { return ledger }
            if let refusal = state.refusals[project], ContinuousClock.now - refusal.at < .seconds(1) {
                throw refusal.error
            }
            return nil
        }
    }

    /// Opens the ledger of `project` (on the opener's thread), or records why it cannot be.
    private func open(_ project: ProjectID) throws -> Ledger {
        do {
            let ledger = try openLedger(project)
            if state.withLock({ $0.refusals.removeValue(forKey: project) }) != nil {
                logger.notice("ledger of project is served again", metadata: ["ledger.project": "\(project)"])
            }
            return ledger
        } catch let error as StoreError {
            let previous = state.withLock { state in
                defer { state.refusals[project] = (error, .now) }
                return state.refusals[project]?.error.message
            }
            if previous != error.message {
                logger.critical(
                    "the ledger of a project cannot be served; its requests get 503 UNAVAILABLE",
                    metadata: ["ledger.project": "\(project)", "error": "\(error)"])
            }
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

    private func openLedger(_ project: ProjectID) throws -> Ledger {
        var options = Ledger.Options()
        options.limits = configuration.limits
        if let initialMapBytes = configuration.initialMapBytes { options.initialMapBytes = initialMapBytes }
        options.commitObserver = { [metrics] requests, operations, duration in
            metrics.recordCommit(requests: requests, operations: operations, duration: duration)
        }
        let delivery = self.delivery(for: project)
        options.sendObserver = { [delivery] seqs in delivery.notify(seqs: seqs) }
        options.replication = cluster?.gate(for: project)
        // In a cluster a commit is durable in etcd before LMDB commits, and a replica reads back from etcd what
        // a system crash undid here: one fsync per commit is enough (docs/cluster.md, "Guarantees").
        options.syncsMetaPage = cluster == nil
        let ledger = try Ledger.open(
            dataDirectory: configuration.dataDirectory, project: project, options: options, logger: logger)
        state.withLock { $0.ledgers[project] = ledger }
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
        state.withLock { $0.delivery(for: project) }
    }

    /// Every project's delivery state made so far (``DeliverySweeper``).
    func deliveries() -> [DeliveryState] {
        state.withLock { Array($0.deliveries.values) }
    }

    /// The checkpoint signer of `project` (its key made on first use: ``CheckpointKeeper``).
    ///
    /// A key that cannot be used (readable by others, not a signing key, another name) is logged once, with
    /// its path, and is the project's readiness problem until a later try succeeds.
    ///
    /// - Throws: `StoreError`, whose message may name the key's path: not for clients.
    func checkpoints(for project: ProjectID) async throws -> CheckpointSigner {
        if let signer = state.withLock({ $0.signers[project] }) { return signer }
        return try await opener.perform { [self] in try makeSigner(project) }
    }

    /// Opens `project`'s checkpoint key (on the opener's thread), or records why it cannot be used.
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

    /// The ledgers opened so far.
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

    public func openLedgers() -> [ProjectID: Ledger] {
        state.withLock { $0.ledgers }
    }

    /// Finishes queued writes of every ledger, and closes them.
    public func closeAll() {
        let ledgers = state.withLock { state in
            defer { state.ledgers.removeAll() }
            return state.ledgers
        }
        for ledger in ledgers.values { ledger.close() }
    }

    // MARK: Seeding replicas (a cluster)

    /// Where copies made for peers (and downloaded from them) are kept: on the data directory's file system, so
    /// a downloaded copy is renamed into place.
    var snapshotsDirectory: String { (configuration.dataDirectory as NSString).appendingPathComponent(".snapshots") }

    /// A consistent copy of `project`'s ledger for a peer that must be seeded (``ClusterRoutes``): the path of
    /// its `data.mdb`, in a directory of its own. Copies more than an hour old are removed at the next one.
    func snapshot(of project: ProjectID) async throws -> String {
        let ledger = try await self.ledger(for: project)
        let root = snapshotsDirectory
        return try await opener.perform {
            let files = FileManager.default
            try files.createDirectory(
                atPath: root, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            for old in (try? files.contentsOfDirectory(atPath: root)) ?? [] {
                let path = root + "/" + old
                let modified = (try? files.attributesOfItem(atPath: path))?[.modificationDate] as? Date
                if let modified, modified.timeIntervalSinceNow < -3600 { try? files.removeItem(atPath: path) }
            }
            let directory = root + "/" + UUID().uuidString
            try files.createDirectory(
                atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            try ledger.backup(to: directory)
            return directory + "/" + project.rawValue + "/data.mdb"
        }
    }

    /// Moves the ledger file at `path` to a directory of its own under `<data>/.quarantine/`; its new path.
    private func quarantine(_ path: String, of project: ProjectID) throws -> String {
        let stamp = ISO8601DateFormatter().string(from: Date()).replacingOccurrences(of: ":", with: "")
        let directory = (configuration.dataDirectory as NSString).appendingPathComponent(
            ".quarantine/\(project.rawValue)-\(stamp)-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let aside = directory + "/data.mdb"
        guard rename(path, aside) == 0 else {
            throw StoreError(.unavailable, "cannot move a forked copy aside: \(String(cString: strerror(errno)))")
        }
        return aside
    }

    /// Removes the copy whose `data.mdb` is at `path` (``snapshot(of:)``), once it has been sent.
    func removeSnapshot(at path: String) {
        let copy = ((path as NSString).deletingLastPathComponent as NSString).deletingLastPathComponent
        guard (copy as NSString).deletingLastPathComponent == snapshotsDirectory else { return }
        try? FileManager.default.removeItem(atPath: copy)
    }

    /// Replaces `project`'s ledger with the `data.mdb` at `copy` (a peer's): checks that it opens as a ledger of
    /// this project, closes the open one, and renames the copy into place; the next use opens it. With
    /// `keepingAside`, the replaced ledger is moved to `<data>/.quarantine/<project>-<time>/` first (a fork:
    /// evidence), and the path logged.
    func replaceLedger(of project: ProjectID, with copy: String, keepingAside: Bool = false) async throws {
        let dataDirectory = configuration.dataDirectory
        let copyDirectory = ((copy as NSString).deletingLastPathComponent as NSString).deletingLastPathComponent
        try await opener.perform { [self, logger] in
            let check = try Ledger.open(
                dataDirectory: copyDirectory, project: project, options: Ledger.Options(mode: .readOnly),
                logger: logger)
            let head = try check.read { try $0.head().seq }
            check.close()
            let directory = (dataDirectory as NSString).appendingPathComponent(project.rawValue)
            let replaced = state.withLock { $0.ledgers.removeValue(forKey: project) }
            replaced?.close()
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            if keepingAside, FileManager.default.fileExists(atPath: directory + "/data.mdb") {
                let aside = try quarantine(directory + "/data.mdb", of: project)
                logger.error(
                    "a forked copy of a project's ledger was moved aside; this node is seeded from a peer",
                    metadata: ["ledger.project": "\(project)", "ledger.path": "\(aside)"])
            }
            guard rename(copy, directory + "/data.mdb") == 0 else {
                throw StoreError(
                    .unavailable, "cannot move the peer's copy into place: \(String(cString: strerror(errno)))")
            }
            unlink(directory + "/lock.mdb")
            try? FileManager.default.removeItem(atPath: copyDirectory)
            logger.notice(
                "the ledger of a project was replaced by a peer's copy",
                metadata: ["ledger.project": "\(project)", "ledger.head": "\(head)"])
        }
    }

    /// `signer`'s latest checkpoint of `ledger` (``CheckpointSigner/latest(of:)``), on the registry's worker: a new
    /// one appends its note to the kept list and syncs the file, which is no work for the cooperative pool.
    func latestCheckpoint(of ledger: Ledger, signedBy signer: CheckpointSigner) async throws -> (
        checkpoint: Checkpoint, note: String
    ) {
        try await opener.perform { try signer.latest(of: ledger) }
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
                try await opener.perform { try signer.signIfGrown(ledger) }
            } catch {
                logger.error(
                    "could not sign the shutdown checkpoint",
                    metadata: ["ledger.project": "\(project)", "error": "\(error)"])
            }
        }
    }
}
