import Foundation
import LedgerCluster
import LedgerCore
import LedgerQueries
import LedgerStore
import Logging
import Synchronization

/// The open ledger of each served project, opened on first use (with its project's cluster gate, in a cluster)
/// and closed at shutdown, and what is wired to each: the wake-up of its waiting devices. In a cluster it is the
/// ``ReplicaHost`` the node is given: its replicas apply to these ledgers, and a replica etcd cannot bring up to
/// date is replaced here by a peer's copy.
///
/// Opening a ledger (LMDB's open, the layout check, the audience recorder's first look) blocks on the disk,
/// so it runs on a ``SerialWorker``, never on a thread of Swift's cooperative pool: one project at a time, each
/// opened once.
///
/// - Note: Thread-safe.
public final class OpenLedgers: ReplicaHost {
    private struct State {
        var ledgers: [ProjectID: Ledger] = [:]
        var deliveries: [ProjectID: DeliveryState] = [:]
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
    /// Opens, copies and replaces ledgers (file I/O) off the cooperative pool.
    private let opener = SerialWorker<BlockingJob, Void>(name: "ledger-open")
    private let configuration: ServerConfiguration
    private let logger: Logger
    private let metrics: ServerMetrics
    /// Each project's gate in a cluster; `nil` for a node of its own.
    private let gates: ReplicaGates?
    /// Raised each time a ledger is opened or one is replaced (``waitForOpenings(after:upTo:)``).
    private let openingsMark = Watermark()

    init(configuration: ServerConfiguration, logger: Logger, metrics: ServerMetrics, gates: ReplicaGates?) {
        self.configuration = configuration
        self.logger = logger
        self.metrics = metrics
        self.gates = gates
    }

    /// How long a request waits for a roll-back of its project's ledger to end before it is answered anyway (then
    /// 503 UNAVAILABLE, should the projections still be being rebuilt).
    static let rollBackPatience = Duration.seconds(10)

    /// The ledger of `project`, which must be one the server serves.
    ///
    /// A project whose ledger cannot be opened (locked by another process, damaged, unreadable) is refused:
    /// the reason is logged once, loudly, each request gets the same `StoreError` for a second, then opening
    /// is tried again.
    ///
    /// - Throws: `StoreError`.
    public func ledger(for project: ProjectID) async throws -> Ledger {
        if let ledger = try openedLedger(project) {
            // A cluster's replica rolling back what etcd refused rebuilds the projections: a request waits for
            // the rebuild instead of being refused for it (a read of acknowledged data has no reason to fail).
            if ledger.isRollingBack { _ = await ledger.waitForRollBack(upTo: Self.rollBackPatience) }
            return ledger
        }
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

    private func openLedger(_ project: ProjectID) throws -> Ledger {
        var options = Ledger.Options()
        options.limits = configuration.limits
        if let initialMapBytes = configuration.initialMapBytes { options.initialMapBytes = initialMapBytes }
        let delivery = self.delivery(for: project)
        options.observer = ProjectCommits(delivery: delivery, metrics: metrics)
        options.replication = gates?.gate(for: project)
        // In a cluster a request is answered only once etcd holds its commit, and a replica reads back from etcd
        // what a system crash undid here (a commit etcd never took was never answered): one fsync per commit is
        // enough (docs/cluster.md, "Guarantees").
        options.syncsMetaPage = gates == nil
        let ledger = try Ledger.open(
            dataDirectory: configuration.dataDirectory, project: project, options: options, logger: logger)
        state.withLock { $0.ledgers[project] = ledger }
        openingsMark.bump()
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

    /// A generation of the open ledgers: it rises each time one is opened or replaced. Read it, look at
    /// ``openLedgers()``, then ``waitForOpenings(after:upTo:)`` to be told of the next.
    var openings: UInt64 { openingsMark.level }

    /// Returns `true` once a ledger was opened or replaced after `generation`, `false` after `timeout` (or when
    /// cancelled).
    func waitForOpenings(after generation: UInt64, upTo timeout: Duration) async -> Bool {
        await openingsMark.wait(for: generation + 1, upTo: timeout)
    }

    /// The ledgers opened so far.
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

    public func reseed(_ project: ProjectID, fromPeer peerURL: String, keepingAside: Bool) async throws {
        guard let secret = configuration.cluster?.peerSecret else {
            throw StoreError(.unavailable, "this node has no cluster.peerSecretFile to ask its peers with")
        }
        let copy = try await ClusterPeers.download(project, from: peerURL, secret: secret, into: snapshotsDirectory)
        try await replaceLedger(of: project, with: copy, keepingAside: keepingAside)
    }

    public func rollBack(_ project: ProjectID, after seq: UInt64) async throws {
        let ledger = try await self.ledger(for: project)
        let removed = try await opener.perform { try ledger.rollBack(after: seq) }
        // The prepared sends of rolled-back seqs must not stand for the events that take those seqs next.
        delivery(for: project).forgetPreparedSends()
        metrics.recordRollBack(events: removed)
    }

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
            openingsMark.bump()
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
}
