import Synchronization

/// What a group-commit batch committed: a result per request and — on a cluster's leader that commits ahead of
/// etcd (``ReplicationGate/commitsAhead``) — the blocks LMDB holds that the cluster does not yet, each with the
/// requests whose events it carries (one block a batch; one a request when the batch was retried request by
/// request).
struct CommittedBatch: Sendable {
    var results: [Result<WriteReceipt, any Error>]
    var ahead: [AheadBlock] = []

    struct AheadBlock: Sendable {
        let block: ReplicatedBlock
        /// Indices into ``CommittedBatch/results``.
        let requests: [Int]
    }

    /// Every request failed with `error`.
    init(failing count: Int, with error: any Error) {
        results = Array(repeating: .failure(error), count: count)
    }

    init(results: [Result<WriteReceipt, any Error>], ahead: [AheadBlock] = []) {
        self.results = results
        self.ahead = ahead
    }
}

/// Hands a batch's blocks to the cluster and answers the batch once the cluster has said what became of every
/// one: a request of a refused block is told nothing was written (its events are then rolled back here, as an
/// unacknowledged suffix — ``Ledger/rollBack(after:)``).
enum AheadAcknowledgement {
    static func handOver(
        _ committed: CommittedBatch, to gate: any ReplicationGate,
        then release: @escaping @Sendable ([Result<WriteReceipt, any Error>]) -> Void
    ) {
        let state = Mutex((results: committed.results, waiting: committed.ahead.count))
        for ahead in committed.ahead {
            gate.handOver(ahead.block) { refusal in
                let done = state.withLock { state -> [Result<WriteReceipt, any Error>]? in
                    if let refusal {
                        for index in ahead.requests where (try? state.results[index].get()) != nil {
                            state.results[index] = .failure(Ledger.refused(refusal))
                        }
                    }
                    state.waiting -= 1
                    return state.waiting == 0 ? state.results : nil
                }
                if let done { release(done) }
            }
        }
    }
}
