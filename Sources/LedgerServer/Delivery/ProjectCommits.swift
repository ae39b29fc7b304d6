import LedgerStore

/// What a project's released commits set going in the server (a ``LedgerCommitObserver``, the last its ledger
/// tells): the devices waiting for its sends are woken, the APNs pusher is told sends committed, and each group
/// commit is counted in the metrics.
struct ProjectCommits: LedgerCommitObserver {
    let delivery: DeliveryState
    let metrics: ServerMetrics

    func writerCommitted(requests: Int, operations: Int, duration: Duration) {
        metrics.recordCommit(requests: requests, operations: operations, duration: duration)
    }

    func released(_ commit: ReleasedCommit) {
        if !commit.sends.isEmpty { delivery.notify(seqs: commit.sends) }
    }
}
