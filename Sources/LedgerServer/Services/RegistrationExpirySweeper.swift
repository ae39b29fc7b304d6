import Foundation
import Logging
import LedgerCluster
import LedgerCore
import LedgerStore
import ServiceLifecycle
import Synchronization

/// The devices heard from since the last sweep, by project: every request a device makes with its own token
/// (``RegistrationInPath`` under the client key) is noted here, in memory, and written to the ledger's
/// `activity` database once a sweep (``Ledger/noteActivity(_:at:)``) — never an event per poll.
///
/// A stream or long poll is activity for as long as it stays open: it is counted open from ``opened(_:in:)``
/// to ``closed(_:in:)``, and every sweep takes the devices with one open as heard from then, so that a device
/// listening on one connection for longer than `registrationExpiry` is never expired under it.
///
/// - Note: Thread-safe.
final class ActivityTracker: Sendable {
    /// Tokens kept per project between two sweeps; past it, further ones wait for the next sweep's devices.
    static let maximumPending = 1_000_000

    private struct State {
        var pending: [ProjectID: Set<RegistrationToken>] = [:]
        /// The streams and polls open now, counted per token (a device may hold more than one).
        var open: [ProjectID: [RegistrationToken: Int]] = [:]
    }

    private let state = Mutex(State())

    func note(_ token: RegistrationToken, in project: ProjectID) {
        state.withLock { state in
            guard state.pending[project, default: []].count < Self.maximumPending else { return }
            state.pending[project, default: []].insert(token)
        }
    }

    /// A stream or a long poll of `token` opened: the device counts as heard from at every sweep until it
    /// closes. Pair each call with one ``closed(_:in:)``.
    func opened(_ token: RegistrationToken, in project: ProjectID) {
        state.withLock { $0.open[project, default: [:]][token, default: 0] += 1 }
    }

    /// A stream or a long poll of `token` closed.
    func closed(_ token: RegistrationToken, in project: ProjectID) {
        state.withLock { state in
            guard let count = state.open[project]?[token] else { return }
            state.open[project]?[token] = count > 1 ? count - 1 : nil
            if state.open[project]?.isEmpty == true { state.open[project] = nil }
        }
    }

    /// The tokens noted for `project` since the last call, and those with a stream or poll open now.
    func take(_ project: ProjectID) -> [RegistrationToken] {
        Array(
            state.withLock { state in
                var tokens = state.pending.removeValue(forKey: project) ?? []
                if let open = state.open[project] { tokens.formUnion(open.keys) }
                return tokens
            })
    }
}

extension LedgerRegistry {
    /// Writes the activity noted for `project` since the last call into `ledger`'s `activity` database.
    func recordActivity(of project: ProjectID, in ledger: Ledger) async throws {
        let noted = activity.take(project)
        guard !noted.isEmpty else { return }
        let now = Int64(Date().timeIntervalSince1970)
        try await onWorker { try ledger.noteActivity(noted, at: now) }
    }
}

/// Expires registrations silent for longer than their project's `registrationExpiry` (FCM's 270 days by
/// default): each sweep writes the activity noted since the last, then appends an `unregistered` event for
/// every registered device last heard from before the cutoff, with the reason `expired` and its last
/// activity — in requests of ``batch`` devices, each its own commit, so that a sweep of a hundred thousand
/// devices interleaves with the other writes rather than holding the writer.
///
/// In a cluster a device's requests may be served by any replica of its project, and each replica notes only
/// the activity it served: every node writes its own notes each sweep, and the project's leader, before it
/// expires anyone, asks every other replica for the last activity of its candidates (``PeerActivity``). A
/// candidate any replica heard from since the cutoff is spared (and its activity noted). When a replica does not
/// answer, nobody is expired that sweep — silence cannot be told from a lost answer — which the log says once
/// per streak and `ledger_expiry_sweeps_total{outcome="skipped"}` counts.
struct RegistrationExpirySweeper: Service {
    static let batch = 1000
    /// Devices expired by one sweep at most; the next sweep takes the rest.
    static let perSweep = PeerActivity.maximumDevices
    static let reasonPrefix = "expired"
    let configuration: ServerConfiguration
    let ledgers: LedgerRegistry
    let logger: Logger

    func run() async {
        await cancelWhenGracefulShutdown {
            var due: [ProjectID: ContinuousClock.Instant] = [:]
            var skipping: Set<ProjectID> = []
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))
                for project in configuration.credentials.projects.sorted(by: { $0.rawValue < $1.rawValue }) {
                    let expiry = configuration.expiry(of: project)
                    let now = ContinuousClock.now
                    guard due[project].map({ $0 <= now }) ?? true else { continue }
                    due[project] = now + .seconds(expiry.sweepSeconds)
                    let outcome = await sweep(project, expiry: expiry)
                    ledgers.metrics.recordExpirySweep(outcome)
                    if case .skipped(let reason) = outcome, skipping.insert(project).inserted {
                        logger.warning(
                            "registrations are not expired while a replica cannot say which devices it heard from",
                            metadata: ["ledger.project": "\(project)", "reason": "\(reason)"])
                    } else if case .completed = outcome, skipping.remove(project) != nil {
                        logger.notice(
                            "every replica answers again: registrations expire again",
                            metadata: ["ledger.project": "\(project)"])
                    }
                }
            }
        }
    }

    /// What became of one sweep.
    enum Outcome: Equatable {
        /// Activity written, and silent registrations expired (if any, and if this node expires them).
        case completed
        /// Activity written; nobody expired: a replica did not say which devices it heard from.
        case skipped(String)
        case failed
    }

    /// One sweep of `project`; failures are logged (the next sweep tries again).
    func sweep(_ project: ProjectID, expiry: RegistrationExpiry) async -> Outcome {
        let cluster = ledgers.cluster
        if let cluster, !cluster.holds(project) {
            _ = ledgers.activity.take(project)  // served nowhere here; nothing to keep
            return .completed
        }
        do {
            let ledger = try await ledgers.ledger(for: project)
            try await ledgers.recordActivity(of: project, in: ledger)
            guard let seconds = expiry.seconds, cluster?.isLeading(project) ?? true else { return .completed }
            let now = Int64(Date().timeIntervalSince1970)
            let cutoff = now - seconds
            // One read for the whole sweep (the stalest first, at most `perSweep`), then commits of `batch`.
            var silent = try await ledgers.onWorker {
                try ledger.silentRegistrations(before: cutoff, limit: Self.perSweep)
            }
            if let cluster, !silent.isEmpty {
                switch await heardElsewhere(project, of: silent.map(\.device), cluster: cluster, now: now) {
                case .failure(let reason):
                    return .skipped(reason.description)
                case .success(let heard):
                    let active = heard.filter { $0.value >= cutoff }
                    try await ledgers.onWorker {
                        try ledger.noteActivity(ofDevices: active.map { ($0.key, $0.value) })
                    }
                    silent = silent.compactMap { entry in
                        guard active[entry.device] == nil else { return nil }
                        return (entry.token, entry.device, max(entry.lastActive, heard[entry.device] ?? 0))
                    }
                }
            }
            let expired = try await expire(silent, of: project, in: ledger, expiry: expiry)
            if expired > 0 {
                ledgers.metrics.recordExpiry(devices: expired)
                logger.notice(
                    "registrations expired after their project's registrationExpiry without activity",
                    metadata: ["ledger.project": "\(project)", "ledger.expired": "\(expired)"])
            }
            return .completed
        } catch {
            logger.error(
                "a sweep for expired registrations failed; the next one tries again",
                metadata: ["ledger.project": "\(project)", "error": "\(error)"])
            return .failed
        }
    }

    /// Appends an `unregistered` event with the reason `expired` for each of `devices`, in requests of ``batch``,
    /// and ends their open streams and long polls at once, as an unregistration or an erasure does; returns how
    /// many it expired (a device unregistered meanwhile is passed over).
    func expire(
        _ devices: [(token: RegistrationToken, device: InstanceID, lastActive: Int64)], of project: ProjectID,
        in ledger: Ledger, expiry: RegistrationExpiry
    ) async throws -> Int {
        var expired = 0
        let notifier = ledgers.delivery(for: project).notifier
        for start in stride(from: 0, to: devices.count, by: Self.batch) where !Task.isCancelled {
            let chunk = devices[start..<min(start + Self.batch, devices.count)]
            let operations: [LedgerOperation] = chunk.map {
                .unregister($0.token, reason: Self.reason(lastActive: $0.lastActive, expiry: expiry))
            }
            let receipt = try await ledger.append(
                WriteRequest(actor: "expiry", requestID: "expiry-\(UUID().uuidString)", operations: operations))
            for (device, outcome) in zip(chunk, receipt.outcomes) where outcome.seq != nil {
                notifier.wake(device.device)
                expired += 1
            }
        }
        return expired
    }

    /// The latest activity any other replica of `project` saw of `devices` (a time past `now`, from a replica
    /// whose clock runs ahead, counts as `now`), or why one did not answer.
    private func heardElsewhere(_ project: ProjectID, of devices: [InstanceID], cluster: ClusterNode, now: Int64) async
        -> Result<[InstanceID: Int64], SkipReason>
    {
        guard let secret = configuration.cluster?.peerSecret else {
            return .failure(SkipReason("this node has no cluster.peerSecretFile to ask the other replicas with"))
        }
        let status: ClusterStatus
        do {
            status = try await cluster.status(of: [project])
        } catch {
            return .failure(SkipReason("etcd did not say which nodes hold the project"))
        }
        let urls = Dictionary(status.nodes.map { ($0.id, $0.url) }, uniquingKeysWith: { first, _ in first })
        let others = (status.projects.first?.replicas ?? []).map(\.node).filter { $0 != cluster.nodeID }
        var heard: [InstanceID: Int64] = [:]
        for node in others {
            guard let url = urls[node] else { return .failure(SkipReason("replica \(node) has no address")) }
            do {
                // In requests of `PeerActivity.batch` devices: far below any request body limit.
                for start in stride(from: 0, to: devices.count, by: PeerActivity.batch) {
                    let batch = Array(devices[start..<min(start + PeerActivity.batch, devices.count)])
                    for entry in try await PeerActivity.ask(project, about: batch, at: url, secret: secret) {
                        heard[entry.device] = max(heard[entry.device] ?? 0, min(entry.lastActive, now))
                    }
                }
            } catch {
                return .failure(SkipReason("replica \(node) did not answer: \(error)"))
            }
        }
        return .success(heard)
    }

    struct SkipReason: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    /// `expired: no activity since <time> (registrationExpiry <n>s)`.
    static func reason(lastActive: Int64, expiry: RegistrationExpiry) -> String {
        let time = LedgerTime(microseconds: lastActive.multipliedReportingOverflow(by: 1_000_000).partialValue)
        return "\(reasonPrefix): no activity since \(time.rfc3339) (registrationExpiry \(expiry.seconds ?? 0)s)"
    }
}
