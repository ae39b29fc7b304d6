import Foundation
import Logging
import LedgerCore
import LedgerStore
import ServiceLifecycle
import Synchronization

/// The devices heard from since the last sweep, by project: every request a device makes with its own token
/// (``RegistrationInPath`` under the client key) is noted here, in memory, and written to the ledger's
/// `activity` database once a sweep (``Ledger/noteActivity(_:at:)``) — never an event per poll.
final class ActivityTracker: Sendable {
    /// Tokens kept per project between two sweeps; past it, further ones wait for the next sweep's devices.
    static let maximumPending = 1_000_000
    private let pending = Mutex<[ProjectID: Set<RegistrationToken>]>([:])

    func note(_ token: RegistrationToken, in project: ProjectID) {
        pending.withLock { pending in
            guard pending[project, default: []].count < Self.maximumPending else { return }
            pending[project, default: []].insert(token)
        }
    }

    /// The tokens noted for `project` since the last call.
    func take(_ project: ProjectID) -> [RegistrationToken] {
        Array(pending.withLock { $0.removeValue(forKey: project) } ?? [])
    }
}

/// Expires registrations silent for longer than their project's `registrationExpiry` (FCM's 270 days by
/// default): each sweep writes the activity noted since the last, then appends an `unregistered` event for
/// every registered device last heard from before the cutoff, with the reason `expired` and its last
/// activity — in requests of ``batch`` devices, each its own commit, so that a sweep of a hundred thousand
/// devices interleaves with the other writes rather than holding the writer.
///
/// Off in a cluster (a device's requests may be served by any node, and each node would know only its own):
/// said once in the log at start.
struct RegistrationExpirySweeper: Service {
    static let batch = 1000
    /// Devices expired by one sweep at most; the next sweep takes the rest.
    static let perSweep = 100_000
    static let reasonPrefix = "expired"
    let configuration: ServerConfiguration
    let ledgers: LedgerRegistry
    let logger: Logger

    func run() async {
        if ledgers.cluster != nil {
            logger.notice("registrations do not expire in a cluster (registrationExpiry is for a single node)")
            // A service that returns ends the whole group: this one waits for the shutdown instead.
            try? await gracefulShutdown()
            return
        }
        await cancelWhenGracefulShutdown {
            var due: [ProjectID: ContinuousClock.Instant] = [:]
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))
                for project in configuration.credentials.projects.sorted(by: { $0.rawValue < $1.rawValue }) {
                    let expiry = configuration.expiry(of: project)
                    let now = ContinuousClock.now
                    guard due[project].map({ $0 <= now }) ?? true else { continue }
                    due[project] = now + .seconds(expiry.sweepSeconds)
                    await sweep(project, expiry: expiry)
                }
            }
        }
    }

    /// One sweep of `project`; failures are logged (the next sweep tries again).
    func sweep(_ project: ProjectID, expiry: RegistrationExpiry) async {
        do {
            let ledger = try await ledgers.ledger(for: project)
            let now = Int64(Date().timeIntervalSince1970)
            let noted = ledgers.activity.take(project)
            try await ledgers.onWorker { try ledger.noteActivity(noted, at: now) }
            guard let seconds = expiry.seconds else { return }
            // One read for the whole sweep (the stalest first, at most `perSweep`), then commits of `batch`.
            let silent = try await ledgers.onWorker {
                try ledger.silentRegistrations(before: now - seconds, limit: Self.perSweep)
            }
            var expired = 0
            for start in stride(from: 0, to: silent.count, by: Self.batch) where !Task.isCancelled {
                let operations: [LedgerOperation] = silent[start..<min(start + Self.batch, silent.count)].map {
                    .unregister($0.token, reason: Self.reason(lastActive: $0.lastActive, expiry: expiry))
                }
                let receipt = try await ledger.append(
                    WriteRequest(actor: "expiry", requestID: "expiry-\(UUID().uuidString)", operations: operations))
                expired += receipt.outcomes.filter { $0.seq != nil }.count
            }
            if expired > 0 {
                ledgers.metrics.recordExpiry(devices: expired)
                logger.notice(
                    "registrations expired after their project's registrationExpiry without activity",
                    metadata: ["ledger.project": "\(project)", "ledger.expired": "\(expired)"])
            }
        } catch {
            logger.error(
                "a sweep for expired registrations failed; the next one tries again",
                metadata: ["ledger.project": "\(project)", "error": "\(error)"])
        }
    }

    /// `expired: no activity since <time> (registrationExpiry <n>s)`.
    static func reason(lastActive: Int64, expiry: RegistrationExpiry) -> String {
        let time = LedgerTime(microseconds: lastActive.multipliedReportingOverflow(by: 1_000_000).partialValue)
        return "\(reasonPrefix): no activity since \(time.rfc3339) (registrationExpiry \(expiry.seconds ?? 0)s)"
    }
}
