import Synchronization

/// What a group-commit batch committed: a result per request, and why LMDB failed a commit of it, if the
/// storage did.
struct CommittedBatch: Sendable {
    var results: [Result<WriteReceipt, any Error>]
    /// Why LMDB failed a commit of this batch, when the storage did (not a request's own error — a time before
    /// the head): a leader that commits ahead gives its leadership up (``ReplicationGate/commitFailed(_:)``).
    var storageFailure: (any Error)?

    /// Every request failed with `error`.
    init(failing count: Int, with error: any Error) {
        results = Array(repeating: .failure(error), count: count)
    }

    init(results: [Result<WriteReceipt, any Error>]) {
        self.results = results
    }

    mutating func noteFailure(_ error: any Error) {
        if let error = error as? StoreError, error.code != .unavailable && error.code != .corrupt { return }
        storageFailure = storageFailure ?? error
    }
}

/// On a cluster's leader that commits ahead of etcd (``ReplicationGate/commitsAhead``): hands each block a
/// batch commits to the cluster as soon as LMDB holds it — before the writer commits the next, so each block
/// follows the one before — and answers the batch once the cluster has said what became of every one. A
/// request of a refused block is told nothing was written (its events are then rolled back here, as an
/// unacknowledged suffix — ``Ledger/rollBack(after:)``).
///
/// - Note: Thread-safe: blocks are handed over on the writer's thread, answered from the replica's task.
final class AheadAcknowledgement: Sendable {
    private struct State {
        var waiting = 0
        var refused: [Int: ReplicationRefusal] = [:]
        /// The batch's results, once its commits are done.
        var results: [Result<WriteReceipt, any Error>]?
    }

    private let state = Mutex(State())
    private let gate: any ReplicationGate
    private let release: @Sendable ([Result<WriteReceipt, any Error>]) -> Void

    init(gate: any ReplicationGate, release: @escaping @Sendable ([Result<WriteReceipt, any Error>]) -> Void) {
        self.gate = gate
        self.release = release
    }

    /// Hands over `block`, which LMDB has just committed, carrying the events of the batch's `requests`
    /// (indices of its results).
    func handOver(_ block: ReplicatedBlock, requests: [Int]) {
        state.withLock { $0.waiting += 1 }
        gate.handOver(block) { [self] refusal in
            let done = state.withLock { state -> [Result<WriteReceipt, any Error>]? in
                if let refusal { for index in requests { state.refused[index] = refusal } }
                state.waiting -= 1
                return state.waiting == 0 ? state.results.map { Self.merged($0, state.refused) } : nil
            }
            if let done { release(done) }
        }
    }

    /// The batch's commits are done, with `results`: answers it now if every block handed over is answered.
    func finish(_ results: [Result<WriteReceipt, any Error>]) {
        let done = state.withLock { state -> [Result<WriteReceipt, any Error>]? in
            state.results = results
            return state.waiting == 0 ? Self.merged(results, state.refused) : nil
        }
        if let done { release(done) }
    }

    private static func merged(
        _ results: [Result<WriteReceipt, any Error>], _ refused: [Int: ReplicationRefusal]
    ) -> [Result<WriteReceipt, any Error>] {
        var results = results
        for (index, refusal) in refused where (try? results[index].get()) != nil {
            results[index] = .failure(Ledger.refused(refusal))
        }
        return results
    }
}
