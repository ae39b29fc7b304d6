import Foundation
import LedgerCluster
import LedgerCore
import ServiceLifecycle

/// Has each open project's latest checkpoint cosigned before an auditor asks: a checkpoint is signed when the
/// log has grown, its replicas cosign it in a cluster (``ReplicaCosigning``), and its witnesses are asked to
/// (``CheckpointWitnesses``) — once a second for a project with witnesses, as issue "No split views" asks, and
/// every ten seconds for one that only has a cluster. The checkpoint and proof routes do the same on demand.
///
/// In a cluster, only the project's leader signs and submits.
struct WitnessCollector: Service {
    let server: ServerContext

    /// How often a project with witnesses is checkpointed and cosigned.
    static let witnessedInterval = Duration.seconds(1)
    /// How often a project in a cluster without witnesses is.
    static let clusterInterval = Duration.seconds(10)

    func run() async {
        // Returns at graceful shutdown, never throws (a service that throws ends the whole group).
        await cancelWhenGracefulShutdown {
            var last: [ProjectID: ContinuousClock.Instant] = [:]
            while !Task.isCancelled {
                try? await Task.sleep(for: Self.witnessedInterval)
                let ledgers = server.ledgers
                for (project, ledger) in ledgers.openLedgers() {
                    let witnessed = server.configuration.witnesses[project] != nil
                    guard witnessed || ledgers.cluster != nil else { continue }
                    if let cluster = ledgers.cluster, !cluster.isLeading(project) { continue }
                    let interval = witnessed ? Self.witnessedInterval : Self.clusterInterval
                    if let previous = last[project], ContinuousClock.now - previous < interval { continue }
                    last[project] = .now
                    // Failures are the witnesses' statuses (logged once per change, in /readyz and the metrics).
                    _ = try? await server.latestCheckpoint(for: project, of: ledger)
                }
            }
        }
    }
}
