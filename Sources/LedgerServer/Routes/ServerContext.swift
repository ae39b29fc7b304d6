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

    /// The project's latest checkpoint of `ledger` (signed now unless the last is under a second old or the log
    /// has not grown), or 503 UNAVAILABLE with a reason and no file paths when its signing key cannot be used (the
    /// registry logs the detail once, and `/readyz` reports it).
    ///
    /// With witnesses configured, the latest checkpoint that a quorum of them cosigned, with their cosignature
    /// lines: the one signed now once they cosign it (submitted here, on demand, if it is new), or an older one;
    /// 503 when none ever was.
    func latestCheckpoint(for project: ProjectID, of ledger: Ledger) async throws -> (
        checkpoint: Checkpoint, note: String
    ) {
        let signer: CheckpointSigner
        do {
            signer = try await ledgers.checkpoints(for: project)
        } catch is StoreError {
            throw FCMError.unavailable(
                "Project \(project) cannot sign checkpoints: its signing key cannot be used (the server log says why).")
        }
        let signedHere = try await ledgers.latestCheckpoint(of: ledger, signedBy: signer)
        // In a cluster this node leads the project (checkpoints are forwarded to the leader): its replicas cosign
        // first.
        let signed =
            ledgers.cluster == nil ? signedHere : await ledgers.replicaCosigned(signedHere, of: project, server: self)
        let witnesses: CheckpointWitnesses
        do {
            guard let configured = try ledgers.witnesses(for: project, signer: signer) else { return signed }
            witnesses = configured
        } catch let error as StoreError {
            ledgers.logger.error(
                "the project's cosigned checkpoints cannot be read; its checkpoints get 503 UNAVAILABLE",
                metadata: ["ledger.project": "\(project)", "error": "\(error)"])
            throw FCMError.unavailable(
                "Project \(project)'s cosigned checkpoints cannot be read (the server log says why).")
        }
        let registry = ledgers
        let size = signed.checkpoint.size
        let cosigned = await witnesses.cosigned(
            signed, proof: { old in try await registry.consistencyProof(of: ledger, from: old, to: size) },
            keep: { keeper, size, note in try await registry.keepCosigned(size: size, note: note, by: keeper) })
        guard let cosigned else {
            let requirement = witnesses.requirement
            throw FCMError.unavailable(
                "Project \(project) has no checkpoint cosigned by \(requirement.quorum) of its "
                    + "\(requirement.witnesses.count) witnesses yet (/readyz says which witness fails and why).")
        }
        return cosigned
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
