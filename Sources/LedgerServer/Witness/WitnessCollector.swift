import Foundation
import LedgerCluster
import ServiceLifecycle

/// Submits each new checkpoint of every open project that has witnesses, at most once a second: a checkpoint is
/// signed when the log has grown, and its witnesses are asked to cosign it (``CheckpointWitnesses``), so that a
/// cosigned checkpoint is ready before an auditor asks. The checkpoint and proof routes do the same on demand.
///
/// In a cluster, only the project's leader signs and submits.
struct WitnessCollector: Service {
    let server: ServerContext

    func run() async {
        // Returns at graceful shutdown, never throws (a service that throws ends the whole group).
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))
                let ledgers = server.ledgers
                for (project, ledger) in ledgers.openLedgers() where server.configuration.witnesses[project] != nil {
                    if let cluster = ledgers.cluster, !cluster.isLeading(project) { continue }
                    // Failures are the witnesses' statuses (logged once per change, in /readyz and the metrics).
                    _ = try? await server.latestCheckpoint(for: project, of: ledger)
                }
            }
        }
    }
}
