import EtcdAPI
import LedgerCore
import LedgerStore
import Logging

/// A project's log in etcd as its leader writes it, every write fenced on the leadership (``ProjectElection``):
/// the takeover, each group commit's block, and the trimming of blocks every replica has applied.
struct LeaderLog: Sendable {
    let project: ProjectID
    /// The election key's create revision: the leadership this log is written under.
    let revision: Int64
    private let node: ClusterNodeContext
    private let election: ProjectElection

    init(election: ProjectElection, revision: Int64, node: ClusterNodeContext) {
        project = election.project
        self.revision = revision
        self.node = node
        self.election = election
    }

    private var keys: ClusterKeys { node.keys }
    private var logger: Logger { node.logger }

    /// Takes the log over at `tail`, this node's head after catching up: a log that began before the cluster
    /// (a single node's, copied to every node) gets its first tail; the parts past the tail, of a commit a
    /// deposed leader did not finish (never acknowledged), are dropped. `false` when the leadership was lost.
    func takeOver(at tail: ReplicationTail) async throws -> Bool {
        if tail.seq > 0, try await node.etcd.get(keys.tail(project)).value == nil {
            let name = election.fenced(
                revision, [.put(keys.tail(project), tail.encoded)],
                alsoIf: [.version(of: keys.tail(project), equals: 0)])
            guard try await node.etcd.txn(name).succeeded else { return false }
        }
        let drop = election.fenced(
            revision,
            [
                .deleteRange(
                    keys.block(project, firstSeq: tail.seq + 1), rangeEnd: EtcdClient.prefixEnd(keys.blocks(project)))
            ])
        return try await node.etcd.txn(drop).succeeded
    }

    /// Writes the blocks the gate hands over, in order, fenced on the election key and on the tail they extend —
    /// as many blocks a transaction as fit ``ClusterConfiguration/maximumBlockBytes`` — until one is refused
    /// (then every block after it is refused too) or the lead ends.
    func write(_ lead: ReplicaGate.Lead) async throws {
        for await jobs in lead {
            var rest = jobs[...]
            while !rest.isEmpty {
                let group = Self.transaction(from: rest, maximumBytes: node.configuration.maximumBlockBytes)
                rest = rest.dropFirst(group.count)
                let result =
                    group.allSatisfy({ $0.revision == revision })
                    ? await write(Array(group))
                    : .failure(ReplicationRefusal(.notLeader, "the leadership changed"))
                for job in group { job.complete(result) }
                if case .failure(let refusal) = result {
                    for job in rest { job.complete(result) }
                    logger.warning(
                        "a block was not replicated; this node stops leading until it has read the log again",
                        metadata: ["ledger.project": "\(project)", "reason": "\(refusal.message)"])
                    return
                }
            }
        }
    }

    /// The jobs at the front of `jobs` that one transaction carries: one whose block must be split goes alone;
    /// the others together while their records fit `maximumBytes`.
    static func transaction(from jobs: ArraySlice<ReplicaGate.Job>, maximumBytes: Int) -> ArraySlice<ReplicaGate.Job> {
        var bytes = 0
        var end = jobs.startIndex
        for job in jobs {
            let size = job.block.byteCount
            if end > jobs.startIndex && (size > maximumBytes || bytes + size > maximumBytes) { break }
            bytes += size
            end += 1
            if size > maximumBytes { break }
        }
        return jobs[jobs.startIndex..<end]
    }

    /// One transaction of consecutive jobs — or, for one job whose block is larger than a transaction may
    /// carry, one transaction a part — whose last moves the tail.
    private func write(_ jobs: [ReplicaGate.Job]) async -> Result<Void, ReplicationRefusal> {
        let leaderKey = keys.leader(project)
        let tailKey = keys.tail(project)
        guard let first = jobs.first else { return .success(()) }
        let tailIs: Etcdserverpb_Compare =
            first.previousTail.seq == 0 && first.previousTail.hash == HashChain.genesis
            ? .version(of: tailKey, equals: 0) : .value(of: tailKey, equals: first.previousTail.encoded)
        let blocks = jobs.map(\.block).filter { !$0.records.isEmpty }
        do {
            guard let last = blocks.last else {
                return try await node.etcd.txn(election.fenced(revision, [])).succeeded
                    ? .success(()) : .failure(ReplicationRefusal(.notLeader, "this node no longer leads \(project)"))
            }
            let end = ReplicationTail(seq: last.lastSeq, hash: last.lastHash)
            // Each transaction: the parts of one large block, or whole blocks; a part names its block's end.
            let transactions: [[(part: ReplicatedBlock, commitLastSeq: UInt64)]] =
                blocks.count == 1 && last.byteCount > node.configuration.maximumBlockBytes
                ? last.split(maximumBytes: node.configuration.maximumBlockBytes).map { [($0, last.lastSeq)] }
                : [blocks.map { ($0, $0.lastSeq) }]
            for (index, parts) in transactions.enumerated() {
                let puts = try parts.map { part, commitLastSeq in
                    Etcdserverpb_RequestOp.put(
                        keys.block(project, firstSeq: part.firstSeq),
                        try StoredBlock(block: part, commitLastSeq: commitLastSeq, leader: node.nodeID).encoded())
                }
                var request = election.fenced(revision, puts, alsoIf: [tailIs])
                if index == transactions.count - 1 { request.success.append(.put(tailKey, end.encoded)) }
                request.failure = [.range(leaderKey), .range(tailKey)]
                let response = try await node.etcd.txn(request)
                if response.succeeded { continue }
                // Refused: the election key is not ours any more, or the tail moved — perhaps by this very
                // transaction, tried again on another member after the first answered too late.
                let leader = response.responses.first?.responseRange.kvs.first
                guard leader?.createRevision == revision else {
                    return .failure(ReplicationRefusal(.notLeader, "this node no longer leads project \(project)"))
                }
                let tail = try response.responses.last?.responseRange.kvs.first.map {
                    try ReplicationTail(decoding: $0.value)
                }
                if index == transactions.count - 1, tail == end { continue }
                return .failure(ReplicationRefusal(.staleTail, "the log of project \(project) moved in the cluster"))
            }
            return .success(())
        } catch {
            return .failure(ReplicationRefusal(.clusterUnavailable, "etcd: \(error)"))
        }
    }

    /// The least time between two trims. Each reads every replica's position and the blocks below them, and
    /// deletes and compacts: under load every replica reports its position twice a second
    /// (``ReplicaReporter/reportInterval``), and what they report within this time is trimmed at once.
    static let trimInterval: Duration = .seconds(1)
    /// How long trimming waits for a report before it looks again anyway. A safety net only: every position that
    /// moves reaches it through the watch (the leader's own head as its own report), and a watch that fails is
    /// started again; this bounds what an event lost between two watches could leave in etcd.
    static let trimSafetyNet: Duration = .seconds(30)

    /// While `gate` leads: trims the blocks every replica has applied beyond the retention, below the head `head`
    /// reads — at once, then whenever a replica's applied position changes in etcd (a watch on the project's
    /// `applied/` keys: the replicas' reports, the leader's own among them), at most once a ``trimInterval``.
    func maintain(gate: ReplicaGate, head: @Sendable () async throws -> LedgerHead) async throws {
        let reports = Watermark()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await watchReports(raising: reports) }
            defer { group.cancelAll() }
            while gate.isLeading {
                let seen = reports.level
                let started = ContinuousClock.now
                try await trim(head: try await head())
                try await Task.sleep(until: started + Self.trimInterval)
                _ = await reports.wait(for: seen + 1, upTo: Self.trimSafetyNet)
                try Task.checkCancellation()
            }
        }
    }

    /// Raises `reports` at each change of the project's `applied/` keys, until cancelled. A watch that fails is
    /// watched again after ``trimInterval`` (the next member, as ``EtcdClient/watch(prefix:fromRevision:)`` picks
    /// it), and raises it once: a change may have gone unseen in between.
    private func watchReports(raising reports: Watermark) async throws {
        while true {
            do {
                for try await response in node.etcd.watch(prefix: keys.applied(project), fromRevision: 0)
                where !response.events.isEmpty {
                    reports.bump()
                }
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                logger.debug(
                    "the watch of the replicas' positions ended",
                    metadata: ["ledger.project": "\(project)", "error": "\(error)"])
            }
            try Task.checkCancellation()
            reports.bump()
            try await Task.sleep(for: Self.trimInterval)
        }
    }

    /// Deletes the blocks below the lowest seq every holder has applied and below the retention, keeping the
    /// last block that begins at or before it.
    private func trim(head: LedgerHead) async throws {
        let applied = try await node.etcd.appliedPositions(of: project, keys: keys)
        var lowest = head.seq
        for holder in node.holders(of: project) {
            // A holder that has not reported keeps everything.
            guard let position = applied[holder] else { return }
            lowest = min(lowest, position.seq)
        }
        guard lowest > node.configuration.retainedEvents else { return }
        let floor = min(lowest, head.seq - node.configuration.retainedEvents)
        let below = try await node.etcd.range(
            keys.blocks(project), rangeEnd: Array(keys.block(project, firstSeq: floor + 1).utf8), keysOnly: true)
        guard below.kvs.count > 1, let keep = below.kvs.last else { return }
        let deleted = try await node.etcd.txn(
            election.fenced(revision, [.deleteRange(keys.blocks(project), rangeEnd: Array(keep.key))]))
        // The trimmed blocks' values stay readable at older revisions until etcd's history is compacted past
        // them: an erased device's token must not outlive the trimmed window there either.
        guard deleted.succeeded else { return }
        do {
            try await node.etcd.compact(revision: deleted.header.revision)
        } catch {
            // Another node (or etcd's own auto-compaction) compacted further: nothing older is left.
            logger.debug("etcd's history was not compacted", metadata: ["error": "\(error)"])
        }
    }
}
