import Hummingbird
import HummingbirdCore
import HummingbirdHTTP2
import LedgerCore
import LedgerStore
import Logging
import NIOCore
import ServiceLifecycle
import FCMWire
import LedgerCluster

/// Everything a route needs: configuration and the per-project ledgers.
struct ServerContext: Sendable {
    let configuration: ServerConfiguration
    let ledgers: LedgerRegistry
    let subscriptionRate: RateLimiter<ProjectID>
    let sendQuota: RateLimiter<ProjectID>
    let registrationRate: RateLimiter<ProjectID>
    let deviceSubscriptionRate: RateLimiter<DeviceKey>
    let deviceAcknowledgementRate: RateLimiter<DeviceKey>
    /// Sends requests to the node that serves them, in a cluster (``answerElsewhere(_:project:)``).
    let forwarder: ClusterForwarder?

    init(configuration: ServerConfiguration, ledgers: LedgerRegistry) {
        self.configuration = configuration
        self.ledgers = ledgers
        if let cluster = ledgers.cluster, let forwards = ledgers.forwards {
            forwarder = ClusterForwarder(
                nodeID: cluster.nodeID, peerSecret: cluster.configuration.peerSecret,
                maximumBodyBytes: configuration.maximumBodyBytes, watch: forwards)
        } else {
            forwarder = nil
        }
        let clock = configuration.rateClock
        let changes = Double(configuration.subscriptionChangesPerSecond)
        subscriptionRate = RateLimiter(rate: changes, capacity: changes, now: clock)
        let sends = Double(configuration.sendsPerMinute)
        sendQuota = RateLimiter(rate: sends / 60, capacity: sends, now: clock)
        let registrations = Double(configuration.registrationsPerSecond)
        registrationRate = RateLimiter(rate: registrations, capacity: registrations, now: clock)
        let deviceChanges = Double(configuration.deviceSubscriptionChangesPerMinute)
        deviceSubscriptionRate = RateLimiter(rate: deviceChanges / 60, capacity: deviceChanges, now: clock)
        let acknowledgements = Double(configuration.deviceAcknowledgementsPerMinute)
        deviceAcknowledgementRate = RateLimiter(rate: acknowledgements / 60, capacity: acknowledgements, now: clock)
    }

    /// Takes one subscription change from the project's budget, or throws 429 RESOURCE_EXHAUSTED.
    func takeSubscriptionChange(for project: ProjectID) throws {
        try take(
            subscriptionRate, for: project,
            "Subscription changes for project \(project) are over the rate of \(configuration.subscriptionChangesPerSecond) per second"
        )
    }

    /// Takes one send from the project's quota, or throws 429 QUOTA_EXCEEDED.
    func takeSend(for project: ProjectID) throws {
        try take(
            sendQuota, for: project, errorCode: "QUOTA_EXCEEDED",
            "Sending limit exceeded for project \(project): \(configuration.sendsPerMinute) per minute")
    }

    /// Takes one unit of `limiter`'s budget for `key`, or throws 429 (`errorCode`, RESOURCE_EXHAUSTED by
    /// default) with `Retry-After`.
    func take<Key>(
        _ limiter: RateLimiter<Key>, for key: Key, errorCode: String = "RESOURCE_EXHAUSTED",
        _ message: @autoclosure () -> String
    ) throws {
        guard limiter.take(1, for: key) == 1 else {
            var error = FCMError(
                status: .tooManyRequests, googleStatus: "RESOURCE_EXHAUSTED", errorCode: errorCode,
                message: message() + ".")
            error.headers[.retryAfter] = String(limiter.retryAfter(for: key))
            throw error
        }
    }

    /// The project's ledger, or 503 UNAVAILABLE with a reason and no file paths (the registry logs the
    /// detail once).
    func ledger(for project: ProjectID) async throws -> Ledger {
        do {
            return try await ledgers.ledger(for: project)
        } catch let error as StoreError {
            throw FCMError.unavailable(
                "The ledger of project \(project) cannot be served: \(LedgerRegistry.reason(error)).")
        }
    }

    /// Appends to `ledger` (the caller's, from its request context) and maps storage failures to 503 UNAVAILABLE
    /// (nothing was written; the writer logged why).
    func append(_ request: WriteRequest, to ledger: Ledger) async throws -> WriteReceipt {
        do {
            return try await ledger.append(request)
        } catch let error as StoreError {
            throw FCMError.unavailable("The request could not be stored: \(error.message).")
        }
    }
}
