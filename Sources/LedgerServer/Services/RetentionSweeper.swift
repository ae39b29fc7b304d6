import Foundation
import LedgerCluster
import LedgerCore
import LedgerStore
import Logging
import ServiceLifecycle

/// Ends what a project keeps past its retention periods (``RetentionPeriod``), on the project's leader (alone, on a
/// single node); followers apply the events it appends as they apply any other (``Ledger/applyReplicated(_:)``).
///
/// - `contentRetention`: the contents of sends older than it are forgotten, in requests of at most ``contentBatch``
///   sends (``LedgerOperation/forgetContents(before:limit:)``), each a `retention` event after which the file is
///   compacted; at most ``contentRequestsPerSweep`` requests a sweep, the next sweep takes the rest.
/// - `identifierRetention`: a device whose registration ended (unregistered or expired) longer ago than it is
///   erased, by the actor `retention` with the reason `identifierRetention`, in requests of ``erasureBatch``
///   devices (each an erasure like any other: journaled, compacted), at most ``erasuresPerSweep`` a sweep.
///
/// Never logs a token or a content: only counts.
struct RetentionSweeper: Service {
    static let actor = "retention"
    static let identifierReason = "identifierRetention"
    /// Sends one request forgets at most.
    static let contentBatch = 5000
    static let contentRequestsPerSweep = 10
    /// Devices one request erases at most (one pass over the log for all of them).
    static let erasureBatch = 1000
    static let erasuresPerSweep = 10_000

    let configuration: ServerConfiguration
    let ledgers: LedgerRegistry
    let logger: Logger

    func run() async {
        await cancelWhenGracefulShutdown {
            var due: [String: ContinuousClock.Instant] = [:]
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))
                for project in configuration.credentials.projects.sorted(by: { $0.rawValue < $1.rawValue }) {
                    let retention = configuration.retention(of: project)
                    for (name, period) in [("content", retention.content), ("identifiers", retention.identifiers)] {
                        guard period.seconds != nil else { continue }
                        let key = "\(project.rawValue)/\(name)"
                        let now = ContinuousClock.now
                        guard due[key].map({ $0 <= now }) ?? true else { continue }
                        due[key] = now + .seconds(period.sweepSeconds)
                        await sweep(project, name == "content" ? .content(period) : .identifiers(period))
                    }
                }
            }
        }
    }

    /// One of a project's two sweeps.
    enum Kind {
        case content(RetentionPeriod)
        case identifiers(RetentionPeriod)
    }

    /// One sweep of `project`, when this node leads it (or is alone); failures are logged and counted, and the
    /// next sweep tries again.
    func sweep(_ project: ProjectID, _ kind: Kind) async {
        if let cluster = ledgers.cluster, !cluster.isLeading(project) { return }
        do {
            let ledger = try await ledgers.ledger(for: project)
            let now = Int64(Date().timeIntervalSince1970)
            switch kind {
            case .content(let period):
                guard let seconds = period.seconds else { return }
                let cutoff = LedgerTime(
                    microseconds: (now - seconds).multipliedReportingOverflow(by: 1_000_000).partialValue)
                let forgotten = try await forgetContents(before: cutoff, in: ledger)
                if forgotten > 0 {
                    ledgers.metrics.recordRetention(contents: forgotten)
                    logger.notice(
                        "forgot the contents of sends older than the project's contentRetention",
                        metadata: ["ledger.project": "\(project)", "ledger.forgotten": "\(forgotten)"])
                }
            case .identifiers(let period):
                guard let seconds = period.seconds else { return }
                let cutoff = LedgerTime(
                    microseconds: (now - seconds).multipliedReportingOverflow(by: 1_000_000).partialValue)
                let erased = try await eraseEnded(before: cutoff, of: project, in: ledger)
                if erased > 0 {
                    ledgers.metrics.recordRetention(devices: erased)
                    logger.notice(
                        "erased devices whose registration ended longer ago than the project's identifierRetention",
                        metadata: ["ledger.project": "\(project)", "ledger.erased": "\(erased)"])
                }
            }
            ledgers.metrics.recordRetentionSweep(failed: false)
        } catch {
            ledgers.metrics.recordRetentionSweep(failed: true)
            logger.error(
                "a retention sweep failed; the next one tries again",
                metadata: ["ledger.project": "\(project)", "error": "\(error)"])
        }
    }

    /// Forgets the contents of sends before `cutoff`, in requests of ``contentBatch``; how many it forgot.
    func forgetContents(before cutoff: LedgerTime, in ledger: Ledger) async throws -> Int {
        var forgotten = 0
        for _ in 0..<Self.contentRequestsPerSweep where !Task.isCancelled {
            let receipt = try await ledger.append(
                WriteRequest(
                    actor: Self.actor, requestID: "retention-\(UUID().uuidString)",
                    operations: [.forgetContents(before: cutoff, limit: Self.contentBatch)]))
            guard let seq = receipt.outcomes.first?.seq else { break }
            let event = try await ledgers.onWorker { try ledger.read { try $0.event(at: seq) } }
            if case .retention(let sweep)? = event?.body { forgotten += Int(clamping: sweep.forgottenContents) }
        }
        return forgotten
    }

    /// Erases the devices whose registration ended before `cutoff`, in requests of ``erasureBatch``; how many.
    func eraseEnded(before cutoff: LedgerTime, of project: ProjectID, in ledger: Ledger) async throws -> Int {
        let tokens = try await ledgers.onWorker {
            try ledger.endedRegistrations(before: cutoff, limit: Self.erasuresPerSweep)
        }
        var erased = 0
        for start in stride(from: 0, to: tokens.count, by: Self.erasureBatch) where !Task.isCancelled {
            let chunk = tokens[start..<min(start + Self.erasureBatch, tokens.count)]
            let receipt = try await ledger.append(
                WriteRequest(
                    actor: Self.actor, requestID: "retention-\(UUID().uuidString)",
                    operations: chunk.map { .erase($0, reason: Self.identifierReason) }))
            erased += receipt.outcomes.filter { $0.seq != nil }.count
        }
        return erased
    }
}
