import Foundation
import LedgerCluster
import LedgerCore
import LedgerStore
import ServiceLifecycle

/// Has each open project's latest checkpoint cosigned before an auditor asks: a checkpoint is signed when the
/// log has grown, its replicas cosign it in a cluster (``ReplicaCosigning``), and its witnesses are asked to
/// (``CheckpointWitnesses``). The checkpoint and proof routes do the same on demand.
///
/// One task per project that has witnesses or a cluster, woken by what gives it work, never by a tick: its log
/// grew past the checkpoint last served (``Ledger/waitForHead(_:upTo:)``), its ledger was opened or replaced, or
/// — in a cluster — a change of leadership (``ClusterNode/waitForRoutingChange(after:upTo:)``). A round that
/// leaves the log ahead of what was served (a witness missed the quorum, or the signer's second was not over) is
/// tried again. Rounds are paced: at most one per ``witnessedInterval`` (or ``clusterInterval``), the first an
/// interval after the project could be signed here.
///
/// In a cluster, only the project's leader signs and submits.
struct WitnessCollector: Service {
    let server: ServerContext

    /// How often at most a project with witnesses is checkpointed and cosigned: its checkpoint and proof routes
    /// serve only a checkpoint a quorum cosigned, and this bounds how far that one lags the log (a second is also
    /// as often as the signer signs); it is also how soon a round that missed the quorum is tried again.
    static let witnessedInterval = Duration.seconds(1)
    /// How often at most a project in a cluster without witnesses is.
    static let clusterInterval = Duration.seconds(10)
    /// The safety net: a project's task looks again this long after its last wake-up even when nothing woke it.
    /// Every cause of work it knows of notifies it (the head, an opening, a change of leadership); the net bounds
    /// what one missed would cost, as the forwarder's and placement's 5 s nets do.
    static let safetyNet = Duration.seconds(5)

    func run() async {
        let ledgers = server.ledgers
        let projects = server.configuration.credentials.projects.filter { project in
            server.configuration.witnesses[project] != nil || ledgers.cluster != nil
        }
        // Returns at graceful shutdown, never throws (a service that throws ends the whole group).
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                for project in projects { group.addTask { await collect(project) } }
            }
        }
    }

    /// Rounds for `project` until the task is cancelled.
    private func collect(_ project: ProjectID) async {
        let ledgers = server.ledgers
        let interval = server.configuration.witnesses[project] != nil ? Self.witnessedInterval : Self.clusterInterval
        var lastRound: ContinuousClock.Instant?
        // The size of the checkpoint the last round served (cosigned, with witnesses).
        var served: UInt64 = 0
        while !Task.isCancelled {
            let openings = ledgers.opened.openings
            let routing = ledgers.cluster?.routingGeneration
            guard let ledger = ledgers.openLedgers()[project], ledgers.cluster?.isLeading(project) ?? true else {
                lastRound = nil
                await wake(after: openings, routing: routing)
                continue
            }
            // Becoming able to sign (the ledger opened, the leadership taken) counts as a round: the first is an
            // interval later, so a burst of writes that follows is not checkpointed at its first event.
            let last = lastRound ?? .now
            lastRound = last
            guard ledger.acknowledgedSeq > served else {
                await wake(after: openings, routing: routing, head: (ledger, served + 1))
                continue
            }
            // Pacing, not polling: the log has grown, and the round waits out the rest of its interval.
            do { try await Task.sleep(until: last + interval, clock: .continuous) } catch { return }
            lastRound = .now
            // Failures are the witnesses' statuses (logged once per change, in /readyz and the metrics); a round
            // that served less than the head (a missed quorum, the signer's second not over) is tried again.
            served = (try? await server.latestCheckpoint(for: project, of: ledger))?.checkpoint.size ?? 0
        }
    }

    /// Returns at the first of: the ledgers opened past `openings`, the routing past `routing` (a cluster), the
    /// ledger's head at `head.seq`, or ``safetyNet``.
    private func wake(after openings: UInt64, routing: UInt64?, head: (ledger: Ledger, seq: UInt64)? = nil) async {
        let ledgers = server.ledgers
        await withTaskGroup(of: Void.self) { group in
            group.addTask { _ = await ledgers.opened.waitForOpenings(after: openings, upTo: Self.safetyNet) }
            if let cluster = ledgers.cluster, let routing {
                group.addTask { _ = await cluster.waitForRoutingChange(after: routing, upTo: Self.safetyNet) }
            }
            if let head {
                group.addTask { _ = await head.ledger.waitForHead(head.seq, upTo: Self.safetyNet) }
            }
            await group.next()
            group.cancelAll()
        }
    }
}
