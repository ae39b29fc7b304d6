import EtcdAPI
import LedgerCore
import LedgerStore
import Logging

/// One project's replica on this node: it keeps the local ledger equal to the log in etcd.
///
/// The loop, again after any failure: catch up (apply every whole commit in etcd past the local head, in
/// order); if no node leads, campaign (``ProjectElection``); if this node won, catch up again (no other node can
/// write now), take the log over and lead — write each group commit's block to etcd (``LeaderLog``) until the
/// leadership is lost; otherwise follow — watch the project's keys and catch up at each new tail — until the
/// leader's key goes. A replica etcd cannot bring up to date (trimmed past its head, or forked) is re-seeded
/// from a peer's copy (``ReplicaHost/reseed(_:fromPeer:keepingAside:)``).
final class ProjectReplica: Sendable {
    let project: ProjectID
    let gate: ReplicaGate
    private let node: ClusterNodeContext
    private let election: ProjectElection
    private let reporter: ReplicaReporter
    private let reseeder: ReplicaReseeder
    private let applier = SerialWorker<BlockingJob, Void>(name: "ledger-replica")

    init(project: ProjectID, gate: ReplicaGate, node: ClusterNodeContext) {
        self.project = project
        self.gate = gate
        self.node = node
        election = ProjectElection(project: project, node: node)
        reporter = ReplicaReporter(project: project, node: node)
        reseeder = ReplicaReseeder(project: project, node: node, reporter: reporter)
    }

    var status: ReplicaStatus { reporter.status }
    private var keys: ClusterKeys { node.keys }
    private var logger: Logger { node.logger }

    /// Runs until the task is cancelled.
    func run() async {
        defer {
            gate.follow()
            applier.stop()
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.reporter.run() }
            await replicate()
            group.cancelAll()
        }
    }

    /// The replica's loop: a cycle, again after any failure, until the task is cancelled.
    private func replicate() async {
        while !Task.isCancelled {
            do {
                let ledger = try await node.host.ledger(for: project)
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        try await self.reporter.reportProgress(of: ledger) { try await self.head(of: ledger) }
                    }
                    group.addTask { try await self.cycle(ledger) }
                    // The cycle ends (the reporter never does); the next one begins with a new reporter.
                    _ = try await group.next()
                    group.cancelAll()
                }
            } catch is CancellationError {
                return
            } catch let behind as ReplicaBehind {
                gate.follow()
                await reseeder.reseed(
                    because: "\(behind)", fromPeerThrough: behind.firstHeld - 1, head: behind.head, keepAside: false)
            } catch let ahead as ReplicaAhead {
                gate.follow()
                await rollBack(ahead)
            } catch let forked as ReplicaForked {
                gate.follow()
                await reseeder.reseed(
                    because: forked.description, fromPeerThrough: 1, head: forked.head, keepAside: true)
            } catch {
                gate.follow()
                if let storage = error as? StoreError, storage.code == .unavailable {
                    // This replica cannot be written (the message names a full disk, and no internals): another
                    // holder can lead.
                    reporter.update { $0.stalled = storage.message }
                    await election.resignIfHeld()
                }
                // One line per streak of the same failure (a replica that cannot catch up fails the same way
                // every 200 ms); the state says the rest (``ReplicaReporter/run()``).
                let reason = "\(error)"
                let repeated = reporter.update { state in
                    defer { state.progress.failed(reason) }
                    return state.progress.lastFailure == reason
                }
                if !Task.isCancelled {
                    logger.log(
                        level: repeated ? .debug : .warning, "cluster replica restarts",
                        metadata: ["ledger.project": "\(project)", "error": "\(reason)"])
                }
                // A replica that cannot write (a full disk) tries again less often.
                try? await Task.sleep(for: .milliseconds(status.stalled == nil ? 200 : 1000))
            }
        }
    }

    /// Rolls the replica's unacknowledged suffix back (the server truncates the open ledger's log and rebuilds
    /// its projections in place, while the gate follows); marks the replica damaged, and waits, when that fails.
    private func rollBack(_ ahead: ReplicaAhead) async {
        logger.warning(
            "rolling back events this node committed ahead of etcd, which etcd did not take",
            metadata: [
                "ledger.project": "\(project)", "cluster.head": "\(ahead.head)", "cluster.rollBackTo": "\(ahead.seq)",
            ])
        do {
            try await node.host.rollBack(project, after: ahead.seq)
            reporter.update { $0.damage = nil }
        } catch {
            _ = reporter.damaged("\(ahead), and it could not be rolled back: \(error)")
            try? await Task.sleep(for: .seconds(2))
        }
    }

    /// One pass: catch up, then lead or follow until that ends.
    private func cycle(_ ledger: Ledger) async throws {
        let revision = try await catchUp(ledger)
        if let leader = try await election.leader() {
            reporter.noteLeader(leader.nodeID)
            if election.isThisNode(leader) {
                try await lead(ledger, revision: leader.revision)
            } else {
                try await follow(ledger, from: revision)
            }
            return
        }
        reporter.noteLeader(nil)
        if let won = try await election.campaign() {
            try await lead(ledger, revision: won)
        }
    }

    /// `error` as ``ReplicaReseeder/behindOrForked(head:firstHeld:revision:)`` found it — a fork being perhaps
    /// a suffix to roll back.
    private func aheadOrForked(_ error: any Error, _ ledger: Ledger, tail: ReplicationTail, revision: Int64)
        async throws -> any Error
    {
        guard let fork = error as? ReplicaForked else { return error }
        return try await reseeder.aheadOrForked(fork, ledger: ledger, tail: tail, revision: revision)
    }

    private func head(of ledger: Ledger) async throws -> LedgerHead {
        try await applier.perform { try ledger.read { try $0.head() } }
    }

    // MARK: Following

    /// Applies every whole commit in etcd after the local head, through the tail; returns the revision
    /// it read at.
    @discardableResult
    func catchUp(_ ledger: Ledger) async throws -> Int64 {
        let (tailValue, revision) = try await node.etcd.get(keys.tail(project))
        var head = try await head(of: ledger)
        reporter.noteApplied(head)
        guard let tailValue else {
            // Nothing replicated yet: an empty replica is caught up; one that holds a log (a single node's,
            // copied to every node before the cluster's first start) waits for the first leader to name its
            // head as the tail.
            reporter.update { [head] in $0.caughtUp = head.seq == 0 }
            return revision
        }
        let tail = try ReplicationTail(decoding: tailValue.value)
        reporter.update { $0.progress.tail(tail.seq, at: .now) }
        if tail.seq < head.seq {
            throw try await reseeder.aheadOrForked(
                .pastTail(head: head.seq, tail: tail.seq), ledger: ledger, tail: tail, revision: revision)
        }
        // The parts read of a commit not yet whole, and the seq the next part must begin at.
        var pending: [StoredBlock] = []
        var next = head.seq + 1
        // Bounded by bytes: as many blocks as fit the budget when each is as large as any configuration allows
        // (a leader's may differ from this node's).
        let perRange = EtcdClient.blocksPerRange(maximumBlockBytes: ClusterConfiguration.blockBytesRange.upperBound)
        while head.seq < tail.seq {
            let response = try await node.etcd.range(
                keys.block(project, firstSeq: next), rangeEnd: EtcdClient.prefixEnd(keys.blocks(project)),
                limit: perRange, revision: revision)
            guard !response.kvs.isEmpty else {
                throw try await aheadOrForked(
                    reseeder.behindOrForked(head: head.seq, firstHeld: tail.seq + 1, revision: revision), ledger,
                    tail: tail, revision: revision)
            }
            for kv in response.kvs {
                let part = try StoredBlock(decoding: kv.value)
                guard part.block.firstSeq == next else {
                    // No part begins after this replica's head: etcd no longer holds those seqs (a peer's copy
                    // must seed it), or the head is not at the end of one of the cluster's commits (a fork).
                    throw try await aheadOrForked(
                        reseeder.behindOrForked(head: head.seq, firstHeld: part.block.firstSeq, revision: revision),
                        ledger, tail: tail, revision: revision)
                }
                guard part.block.lastSeq <= tail.seq else { break }
                if part.block.firstSeq == head.seq + 1, part.block.previousHash != head.hash {
                    throw try await reseeder.aheadOrForked(
                        .notFollowed(head: head.seq), ledger: ledger, tail: tail, revision: revision)
                }
                pending.append(part)
                next = part.block.lastSeq + 1
                guard let commit = StoredBlock.commit(of: pending) else { continue }
                pending = []
                head = try await apply(commit, to: ledger)
            }
            reporter.noteApplied(head)
            if let last = response.kvs.last,
                (ClusterKeys.seq(inBlockKey: String(decoding: last.key, as: UTF8.self)) ?? 0) > tail.seq
            {
                break
            }
        }
        guard head.seq == tail.seq, head.hash == tail.hash else {
            throw try await reseeder.aheadOrForked(
                .headDiffers(head: head.seq, tail: tail), ledger: ledger, tail: tail, revision: revision)
        }
        reporter.update {
            $0.damage = nil
            $0.stalled = nil
            $0.caughtUp = true
        }
        try await reporter.reportApplied(head)
        return revision
    }

    /// Watches the project's keys from `revision` + 1 until the leader's key is deleted: keeps the parts the
    /// watch delivers and, at each new tail, applies the whole commits they make up to it — reading from etcd
    /// (``catchUp(_:)``) only when a part is missing.
    private func follow(_ ledger: Ledger, from revision: Int64) async throws {
        let leaderKey = keys.leader(project)
        let tailKey = keys.tail(project)
        let blocksPrefix = keys.blocks(project)
        var parts: [UInt64: StoredBlock] = [:]
        for try await response in node.etcd.watch(prefix: keys.project(project), fromRevision: revision + 1) {
            var tail: ReplicationTail?
            for event in response.events
            where event.type == .put || String(decoding: event.kv.key, as: UTF8.self) == leaderKey {
                let key = String(decoding: event.kv.key, as: UTF8.self)
                if key == leaderKey {
                    if event.type == .delete { return }
                    reporter.noteLeader(String(decoding: event.kv.value, as: UTF8.self))
                } else if key == tailKey {
                    tail = try ReplicationTail(decoding: event.kv.value)
                    reporter.update { $0.progress.tail(tail?.seq ?? 0, at: .now) }
                } else if key.hasPrefix(blocksPrefix) {
                    let part = try StoredBlock(decoding: event.kv.value)
                    parts[part.block.firstSeq] = part
                }
            }
            if let tail { try await apply(parts: &parts, through: tail, ledger) }
        }
        try Task.checkCancellation()
    }

    /// Applies the whole commits `parts` holds from the head on, through `tail`; catches up from etcd when
    /// one is missing.
    private func apply(parts: inout [UInt64: StoredBlock], through tail: ReplicationTail, _ ledger: Ledger)
        async throws
    {
        var head = try await head(of: ledger)
        while head.seq < tail.seq {
            var next = head.seq + 1
            var commitParts: [StoredBlock] = []
            var commit: ReplicatedBlock?
            while commit == nil, let part = parts[next], part.block.lastSeq <= tail.seq {
                commitParts.append(part)
                next = part.block.lastSeq + 1
                commit = StoredBlock.commit(of: commitParts)
            }
            guard let commit else {
                // A part the watch did not bring (it began after it was written): read it from etcd.
                parts.removeAll()
                try await catchUp(ledger)
                return
            }
            head = try await apply(commit, to: ledger)
            let through = head.seq
            parts = parts.filter { $0.key > through }
        }
        guard head.seq != tail.seq || head.hash == tail.hash else {
            throw try await reseeder.aheadOrForked(
                .headDiffers(head: head.seq, tail: tail), ledger: ledger, tail: tail, revision: 0)
        }
        reporter.noteApplied(head)
    }

    /// Applies `commit` on the replica's worker; the head after it.
    private func apply(_ commit: ReplicatedBlock, to ledger: Ledger) async throws -> LedgerHead {
        let head = try await applier.perform {
            if case .applied(let head) = try ledger.applyReplicated(commit) { return head }
            return try ledger.read { try $0.head() }
        }
        reporter.update { $0.stalled = nil }
        return head
    }

    // MARK: Leading

    /// Leads as the holder of the election key created at `revision`: catches up, takes the log over, opens the
    /// gate, then writes the blocks the writer hands over until the leadership is lost.
    private func lead(_ ledger: Ledger, revision: Int64) async throws {
        reporter.noteLeader(node.nodeID)
        let readAt = try await catchUp(ledger)
        let head = try await head(of: ledger)
        let tail = ReplicationTail(seq: head.seq, hash: head.hash)
        let log = LeaderLog(election: election, revision: revision, node: node)
        guard try await log.takeOver(at: tail) else { return }
        reporter.update { $0.caughtUp = true }
        let jobs = gate.lead(revision: revision, tail: tail)
        defer { gate.follow() }
        logger.notice(
            "this node writes project", metadata: ["ledger.project": "\(project)", "cluster.tail": "\(tail)"])
        try await applier.perform { try ledger.recordMissingAudiences() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await log.write(jobs) }
            group.addTask { try await self.election.observe(revision: revision, from: readAt + 1) }
            group.addTask { try await log.maintain(gate: self.gate) { try await self.head(of: ledger) } }
            // The first to end ends the leadership (each ends only when it is lost, or on failure).
            _ = try await group.next()
            group.cancelAll()
        }
        if gate.takeLostCommit() {
            // The ledger could not commit: a storage failure, which the run loop reports, and for which this
            // node gives the leadership up (it applies what the cluster holds when it can).
            throw StoreError(.unavailable, "this node's ledger could not commit a block (is its disk full?)")
        }
    }

    /// Gives the leadership up, if this node holds it (placement moved the project away).
    ///
    /// - Parameter role: the gate's role before the replica was stopped.
    func resign(from role: ReplicaGate.Role) async {
        guard case .leading(let revision, _) = role else { return }
        gate.follow()
        await election.resign(revision: revision)
    }
}
