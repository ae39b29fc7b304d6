import EtcdAPI
import Foundation
import LedgerCore
import LedgerStore
import Logging
import Synchronization

/// One project's replica on this node: it keeps the local ledger equal to the log in etcd, campaigns for the
/// project's leadership when no node holds it, and while it leads writes each group commit's block to etcd in
/// a transaction fenced on its election key (``ReplicaGate``).
///
/// The loop, again after any failure: catch up (apply every whole commit in etcd past the local head, in
/// order); if no node leads, campaign; if this node won, catch up again (no other node can write now), drop
/// the parts of a commit a deposed leader left unfinished, and lead; otherwise follow — watch the project's
/// keys and catch up at each new tail — until the leader's key goes.
final class ProjectReplica: Sendable {
    /// What the replica last knew, for status and routing.
    struct Status: Sendable {
        var appliedSeq: UInt64 = 0
        var headHash: [UInt8] = HashChain.genesis
        /// The node leading the project, as last seen in etcd.
        var leader: String?
        /// Why this replica cannot follow the log (a fork, or a log trimmed past its head), or `nil`.
        var damage: String?
        /// Whether it has caught up with etcd once since it started: until then its reads would be as old as
        /// the node's downtime, and the node serves them from the leader.
        var caughtUp = false
        /// Why this replica could not be written (a full disk), or `nil`: it falls behind, gives up any
        /// leadership and tries again; the node serves its reads from the leader until it has caught up.
        var stalled: String?
        /// What it has applied against where the cluster's log ends, and when it last moved.
        var progress = ReplicaProgress(at: .now)

        /// The replica's state now (``ReplicaProgress/State``).
        var replicaState: ReplicaProgress.State {
            progress.state(at: .now, damage: damage, storageFailure: stalled)
        }
    }

    let project: ProjectID
    let gate: ReplicaGate
    private let node: ClusterNodeContext
    private let ledger: @Sendable () async throws -> Ledger
    private let applier = SerialWorker<BlockingJob, Void>(name: "ledger-replica")
    private let state = Mutex(Status())
    /// When the applied seq was last written to etcd, and which.
    private let reported = Mutex<(seq: UInt64, at: ContinuousClock.Instant)?>(nil)
    /// When the state was last written to etcd, and which.
    private let reportedState = Mutex<(state: String, at: ContinuousClock.Instant)?>(nil)

    init(
        project: ProjectID, gate: ReplicaGate, node: ClusterNodeContext,
        ledger: @escaping @Sendable () async throws -> Ledger
    ) {
        self.project = project
        self.gate = gate
        self.node = node
        self.ledger = ledger
    }

    var status: Status { state.withLock { $0 } }
    private var keys: ClusterKeys { node.keys }
    private var logger: Logger { node.logger }

    /// Runs until the task is cancelled.
    func run() async {
        defer {
            gate.follow()
            applier.stop()
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.reportState() }
            await replicate()
            group.cancelAll()
        }
    }

    /// The replica's loop: a cycle, again after any failure, until the task is cancelled.
    private func replicate() async {
        while !Task.isCancelled {
            do {
                let ledger = try await self.ledger()
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { try await self.reportProgress(ledger) }
                    group.addTask { try await self.cycle(ledger) }
                    // The cycle ends (the reporter never does); the next one begins with a new reporter.
                    _ = try await group.next()
                    group.cancelAll()
                }
            } catch is CancellationError {
                return
            } catch let behind as ReplicaBehind {
                gate.follow()
                await reseed(
                    because: "\(behind)", fromPeerThrough: behind.firstHeld - 1, head: behind.head, keepAside: false)
            } catch let forked as ReplicaForked {
                gate.follow()
                await reseed(because: forked.description, fromPeerThrough: 1, head: forked.head, keepAside: true)
            } catch {
                gate.follow()
                if let storage = error as? StoreError, storage.code == .unavailable {
                    // This replica cannot be written (the message names a full disk, and no internals).
                    state.withLock { $0.stalled = storage.message }
                    await resignWhileStalled()
                }
                // One line per streak of the same failure (a replica that cannot catch up fails the same way
                // every 200 ms); the state says the rest (``reportState()``).
                let reason = "\(error)"
                let repeated = state.withLock { state in
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

    /// Records the project's leader as this replica last saw it; a change raises the node's routing watermark.
    private func noteLeader(_ leader: String?) {
        let changed = state.withLock { state in
            defer { state.leader = leader }
            return state.leader != leader
        }
        if changed { node.routing.bump() }
    }

    /// One pass: catch up, then lead or follow until that ends.
    private func cycle(_ ledger: Ledger) async throws {
        let revision = try await catchUp(ledger)
        let (leaderValue, _) = try await node.etcd.get(keys.leader(project))
        if let leaderValue {
            let leader = String(decoding: leaderValue.value, as: UTF8.self)
            noteLeader(leader)
            if leader == node.nodeID && leaderValue.lease == node.currentLease() {
                try await lead(ledger, revision: leaderValue.createRevision)
            } else {
                try await follow(ledger, from: revision)
            }
            return
        }
        noteLeader(nil)
        if let won = try await campaign() {
            try await lead(ledger, revision: won)
        }
    }

    // MARK: Following

    /// Applies every whole commit in etcd after the local head, through the tail; returns the revision
    /// it read at.
    @discardableResult
    func catchUp(_ ledger: Ledger) async throws -> Int64 {
        let (tailValue, revision) = try await node.etcd.get(keys.tail(project))
        var head = try await applier.perform { try ledger.read { try $0.head() } }
        noteApplied(head)
        guard let tailValue else {
            // Nothing replicated yet: an empty replica is caught up; one that holds a log (a single node's,
            // copied to every node before the cluster's first start) waits for the first leader to name its
            // head as the tail.
            state.withLock { $0.caughtUp = head.seq == 0 }
            return revision
        }
        let tail = try ReplicationTail(decoding: tailValue.value)
        state.withLock { $0.progress.tail(tail.seq) }
        if tail.seq < head.seq {
            throw forked(.pastTail(head: head.seq, tail: tail.seq))
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
                throw try await behindOrForked(head: head.seq, firstHeld: tail.seq + 1, revision: revision)
            }
            for kv in response.kvs {
                let part = try StoredBlock(decoding: kv.value)
                guard part.block.firstSeq == next else {
                    // No part begins after this replica's head: etcd no longer holds those seqs (a peer's copy
                    // must seed it), or the head is not at the end of one of the cluster's commits (a fork).
                    throw try await behindOrForked(head: head.seq, firstHeld: part.block.firstSeq, revision: revision)
                }
                guard part.block.lastSeq <= tail.seq else { break }
                if part.block.firstSeq == head.seq + 1, part.block.previousHash != head.hash {
                    throw forked(.notFollowed(head: head.seq))
                }
                pending.append(part)
                next = part.block.lastSeq + 1
                guard let commit = StoredBlock.commit(of: pending) else { continue }
                pending = []
                head = try await apply(commit, to: ledger)
            }
            noteApplied(head)
            if let last = response.kvs.last,
                (ClusterKeys.seq(inBlockKey: String(decoding: last.key, as: UTF8.self)) ?? 0) > tail.seq
            {
                break
            }
        }
        guard head.seq == tail.seq, head.hash == tail.hash else {
            throw forked(.headDiffers(head: head.seq, tail: tail))
        }
        state.withLock {
            $0.damage = nil
            $0.stalled = nil
            $0.caughtUp = true
        }
        try await reportApplied(head)
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
                    noteLeader(String(decoding: event.kv.value, as: UTF8.self))
                } else if key == tailKey {
                    tail = try ReplicationTail(decoding: event.kv.value)
                    state.withLock { $0.progress.tail(tail?.seq ?? 0) }
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
        var head = try await applier.perform { try ledger.read { try $0.head() } }
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
            throw forked(.headDiffers(head: head.seq, tail: tail))
        }
        noteApplied(head)
    }

    /// Applies `commit` on the replica's worker; the head after it.
    private func apply(_ commit: ReplicatedBlock, to ledger: Ledger) async throws -> LedgerHead {
        let head = try await applier.perform {
            if case .applied(let head) = try ledger.applyReplicated(commit) { return head }
            return try ledger.read { try $0.head() }
        }
        state.withLock { $0.stalled = nil }
        return head
    }

    // MARK: Leading

    /// Creates the project's election key under this node's lease if no one holds it; the key's create
    /// revision when this node won, `nil` when another did.
    private func campaign() async throws -> Int64? {
        let key = keys.leader(project)
        var request = Etcdserverpb_TxnRequest()
        request.compare = [.createRevision(of: key, equals: 0)]
        request.success = [.put(key, Array(node.nodeID.utf8), lease: node.currentLease())]
        let response = try await node.etcd.txn(request)
        guard response.succeeded else { return nil }
        logger.notice("this node leads project", metadata: ["ledger.project": "\(project)"])
        return response.header.revision
    }

    /// Replaces this replica's ledger with a consistent copy from the live peer that has applied the most of
    /// the project, at least through `seq` (``ClusterNode/attach(ledgers:reseed:)``) — keeping the replaced copy
    /// aside when it forked — after which the loop catches up from etcd again; marks the replica damaged, and
    /// waits, when no peer can give one.
    private func reseed(because reason: String, fromPeerThrough seq: UInt64, head: UInt64, keepAside: Bool) async {
        do {
            let members = node.members
            let peers = try await node.etcd.appliedPositions(of: project, keys: keys).compactMap {
                peer, position -> (url: String, seq: UInt64)? in
                guard peer != node.nodeID, let url = members[peer], position.seq >= seq else { return nil }
                return (url, position.seq)
            }
            guard let peer = peers.max(by: { $0.seq < $1.seq }) else {
                throw EtcdError("no live peer has applied seq \(seq) of \(project)")
            }
            guard let reseed = node.reseeder() else { throw EtcdError("this node cannot be re-seeded") }
            logger.warning(
                "re-seeding a replica from a peer's copy",
                metadata: [
                    "ledger.project": "\(project)", "cluster.peer": "\(peer.url)", "cluster.head": "\(head)",
                    "reason": "\(reason)",
                ])
            try await reseed(project, peer.url, keepAside)
            state.withLock { $0.damage = nil }
        } catch {
            _ = damaged("\(reason), and it could not be re-seeded: \(error)")
            try? await Task.sleep(for: .seconds(2))
        }
    }

    /// Why no block of etcd's begins right after `head`: a block that holds `head + 1` (beginning before it)
    /// means the head is not where any of the cluster's commits ends — a fork; otherwise the log was trimmed
    /// past it, and etcd's log begins at `firstHeld`.
    private func behindOrForked(head: UInt64, firstHeld: UInt64, revision: Int64) async throws -> any Error {
        let before = try await node.etcd.range(
            keys.blocks(project), rangeEnd: Array(keys.block(project, firstSeq: head + 2).utf8), limit: 1,
            revision: revision, descending: true)
        if let kv = before.kvs.first {
            let block = try StoredBlock(decoding: kv.value).block
            if block.firstSeq <= head + 1, block.lastSeq >= head + 1 {
                return forked(.insideCommit(head: head, of: block))
            }
        }
        return ReplicaBehind(head: head, firstHeld: firstHeld)
    }

    /// Marks the replica damaged by `fork` (it is not served, and `/readyz` says so until a peer's copy replaces
    /// it) and returns the error to throw.
    private func forked(_ fork: ReplicaForked) -> ReplicaForked {
        _ = damaged(fork.reason)
        return fork
    }

    /// Gives the leadership up, if this node holds it (placement moved the project away): deletes the election
    /// key, fenced on its create revision, so that another holder campaigns at once rather than when this
    /// node's lease would expire — which, the node being alive, it never would.
    ///
    /// - Parameter role: the gate's role before the replica was stopped.
    func resign(from role: ReplicaGate.Role) async {
        guard case .leading(let revision, _) = role else { return }
        await resign(revision: revision)
    }

    /// Gives the leadership up if this node holds it while its replica cannot be written (a full disk: its
    /// own commits fail after etcd took them, and it cannot apply them back): another holder can lead.
    private func resignWhileStalled() async {
        guard let (leader, _) = try? await node.etcd.get(keys.leader(project)), let leader,
            String(decoding: leader.value, as: UTF8.self) == node.nodeID
        else { return }
        await resign(revision: leader.createRevision)
    }

    /// Deletes the election key created at `revision`, fenced on it.
    private func resign(revision: Int64) async {
        gate.follow()
        let request = fenced(revision, [.deleteRange(keys.leader(project), rangeEnd: [])])
        if (try? await node.etcd.txn(request))?.succeeded == true {
            logger.notice("this node gave up leading project", metadata: ["ledger.project": "\(project)"])
        }
    }

    /// Leads as the holder of the election key created at `revision`: catches up, drops unfinished parts,
    /// opens the gate, then writes the blocks the writer hands over until the leadership is lost.
    private func lead(_ ledger: Ledger, revision: Int64) async throws {
        noteLeader(node.nodeID)
        let readAt = try await catchUp(ledger)
        let head = try await applier.perform { try ledger.read { try $0.head() } }
        let tail = ReplicationTail(seq: head.seq, hash: head.hash)
        if head.seq > 0, try await node.etcd.get(keys.tail(project)).value == nil {
            // The first leader of a log that began before the cluster: its head is where the log in etcd begins.
            let name = fenced(
                revision, [.put(keys.tail(project), tail.encoded)],
                alsoIf: [.version(of: keys.tail(project), equals: 0)])
            guard try await node.etcd.txn(name).succeeded else { return }
            state.withLock { $0.caughtUp = true }
        }
        // Parts past the tail are of a commit a deposed leader did not finish: never acknowledged.
        let drop = fenced(
            revision,
            [
                .deleteRange(
                    keys.block(project, firstSeq: tail.seq + 1), rangeEnd: EtcdClient.prefixEnd(keys.blocks(project)))
            ])
        guard try await node.etcd.txn(drop).succeeded else { return }
        let jobs = gate.lead(revision: revision, tail: tail)
        defer { gate.follow() }
        logger.notice(
            "this node writes project", metadata: ["ledger.project": "\(project)", "cluster.tail": "\(tail)"])
        try await ledger.recordMissingAudiences()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await self.writeBlocks(jobs, revision: revision) }
            group.addTask { try await self.watchLeadership(revision: revision, from: readAt + 1) }
            group.addTask { try await self.maintain(ledger, revision: revision) }
            // The first to end ends the leadership (each ends only when it is lost, or on failure).
            _ = try await group.next()
            group.cancelAll()
        }
        if gate.takeLostCommit() {
            // The ledger could not commit what the cluster holds: a storage failure, which the run loop
            // reports, and for which this node gives the leadership up (it applies the block back when it can).
            throw StoreError(
                .unavailable, "this node could not commit a block the cluster accepted (is its disk full?)")
        }
    }

    /// Writes each block the gate hands over, fenced on the election key and on the tail it extends.
    private func writeBlocks(_ jobs: AsyncStream<ReplicaGate.Job>, revision: Int64) async throws {
        for await job in jobs {
            guard job.revision == revision else {
                job.complete(.failure(ReplicationRefusal(.notLeader, "the leadership changed")))
                continue
            }
            let result = await write(job)
            job.complete(result)
            if case .failure(let refusal) = result {
                logger.warning(
                    "a block was not replicated; this node stops leading until it has read the log again",
                    metadata: ["ledger.project": "\(project)", "reason": "\(refusal.message)"])
                return
            }
        }
    }

    /// One job: each part of its block in one transaction; the last one moves the tail.
    private func write(_ job: ReplicaGate.Job) async -> Result<Void, ReplicationRefusal> {
        let leaderKey = keys.leader(project)
        let tailKey = keys.tail(project)
        let tailIs: Etcdserverpb_Compare =
            job.previousTail.seq == 0 && job.previousTail.hash == HashChain.genesis
            ? .version(of: tailKey, equals: 0) : .value(of: tailKey, equals: job.previousTail.encoded)
        do {
            if job.block.records.isEmpty {
                return try await node.etcd.txn(fenced(job.revision, [])).succeeded
                    ? .success(()) : .failure(ReplicationRefusal(.notLeader, "this node no longer leads \(project)"))
            }
            let parts = job.block.split(maximumBytes: node.configuration.maximumBlockBytes)
            let end = ReplicationTail(seq: job.block.lastSeq, hash: job.block.lastHash)
            for (index, part) in parts.enumerated() {
                let stored = StoredBlock(block: part, commitLastSeq: job.block.lastSeq, leader: node.nodeID)
                var request = fenced(
                    job.revision, [.put(keys.block(project, firstSeq: part.firstSeq), try stored.encoded())],
                    alsoIf: [tailIs])
                if index == parts.count - 1 { request.success.append(.put(tailKey, end.encoded)) }
                request.failure = [.range(leaderKey), .range(tailKey)]
                let response = try await node.etcd.txn(request)
                if response.succeeded { continue }
                // Refused: the election key is not ours any more, or the tail moved — perhaps by this very
                // transaction, tried again on another member after the first answered too late.
                let leader = response.responses.first?.responseRange.kvs.first
                guard leader?.createRevision == job.revision else {
                    return .failure(ReplicationRefusal(.notLeader, "this node no longer leads project \(project)"))
                }
                let tail = try response.responses.last?.responseRange.kvs.first.map {
                    try ReplicationTail(decoding: $0.value)
                }
                if index == parts.count - 1, tail == end { continue }
                return .failure(ReplicationRefusal(.staleTail, "the log of project \(project) moved in the cluster"))
            }
            return .success(())
        } catch {
            return .failure(ReplicationRefusal(.clusterUnavailable, "etcd: \(error)"))
        }
    }

    /// Returns when the election key created at `revision` is gone or replaced.
    private func watchLeadership(revision: Int64, from start: Int64) async throws {
        let key = keys.leader(project)
        // The key may have gone between the campaign and the watch's start.
        let (current, _) = try await node.etcd.get(key)
        guard current?.createRevision == revision else { return }
        for try await response in node.etcd.watch(prefix: key, fromRevision: start)
        where response.events.contains(where: { $0.type == .delete || $0.kv.createRevision != revision }) {
            break
        }
        try Task.checkCancellation()
        logger.notice("this node no longer leads project", metadata: ["ledger.project": "\(project)"])
    }

    /// While leading: reports the applied seq, and trims blocks every replica has applied beyond the
    /// retention.
    private func maintain(_ ledger: Ledger, revision: Int64) async throws {
        while true {
            try await Task.sleep(for: .seconds(1))
            guard gate.isLeading else { return }
            let head = try await applier.perform { try ledger.read { try $0.head() } }
            try await trim(head: head, revision: revision)
        }
    }

    /// Deletes the blocks below the lowest seq every holder has applied and below the retention, keeping
    /// the last block that begins at or before it.
    private func trim(head: LedgerHead, revision: Int64) async throws {
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
            fenced(revision, [.deleteRange(keys.blocks(project), rangeEnd: Array(keep.key))]))
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

    /// A transaction of `operations` that lands only while this node's election key is the one created at
    /// `revision` (and `extra` holds): the fence of every write a leader makes.
    private func fenced(
        _ revision: Int64, _ operations: [Etcdserverpb_RequestOp], alsoIf extra: [Etcdserverpb_Compare] = []
    ) -> Etcdserverpb_TxnRequest {
        var request = Etcdserverpb_TxnRequest()
        request.compare = [.createRevision(of: keys.leader(project), equals: revision)] + extra
        request.success = operations
        return request
    }

    // MARK: Progress

    private func noteApplied(_ head: LedgerHead) {
        state.withLock {
            $0.appliedSeq = head.seq
            $0.headHash = head.hash
            $0.progress.applied(head.seq, at: .now)
        }
    }

    /// Every half second, for as long as the replica runs: logs the moment it becomes stalled (once, at error
    /// level) and the moment it recovers, and writes its state to etcd (under the node's lease) when it changed
    /// or that report is ten seconds old, for `/v1/cluster`.
    private func reportState() async {
        var wasStalled = false
        while !Task.isCancelled {
            let current = status.replicaState
            if current.isStalled != wasStalled {
                wasStalled = current.isStalled
                if wasStalled {
                    logger.error(
                        "cluster replica is stalled",
                        metadata: ["ledger.project": "\(project)", "cluster.state": "\(current)"])
                } else {
                    logger.notice(
                        "cluster replica is applying again",
                        metadata: ["ledger.project": "\(project)", "cluster.state": "\(current)"])
                }
            }
            let text = current.description
            let due = reportedState.withLock { last in
                guard let last else { return true }
                return last.state != text || ContinuousClock.now - last.at > .seconds(10)
            }
            let lease = node.currentLease()
            if due, lease != 0,
                (try? await node.etcd.put(keys.state(project, node: node.nodeID), Array(text.utf8), lease: lease))
                    != nil
            {
                reportedState.withLock { $0 = (text, .now) }
            }
            try? await Task.sleep(for: .milliseconds(500))
        }
    }

    /// Every half second, writes the applied seq to etcd when it changed.
    private func reportProgress(_ ledger: Ledger) async throws {
        while true {
            try await Task.sleep(for: .milliseconds(500))
            let head = try await applier.perform { try ledger.read { try $0.head() } }
            noteApplied(head)
            try? await reportApplied(head)
        }
    }

    /// Writes the applied seq and head hash to etcd (under the node's lease) when the seq changed since the
    /// last report, or that report is ten seconds old.
    private func reportApplied(_ head: LedgerHead) async throws {
        let due = reported.withLock { last in
            guard let last else { return true }
            return last.seq != head.seq || ContinuousClock.now - last.at > .seconds(10)
        }
        guard due else { return }
        try await node.etcd.put(
            keys.applied(project, node: node.nodeID), ReplicationTail(seq: head.seq, hash: head.hash).encoded,
            lease: node.currentLease())
        reported.withLock { $0 = (head.seq, .now) }
    }

    /// Marks the replica damaged (``Status/damage``) and returns the error to throw.
    ///
    /// Logged once per damage: a replica that stays damaged finds it again at every try. A damage already
    /// recorded with what came of it (`<reason>, and it could not be re-seeded: …`) is the same damage, and keeps
    /// the longer text — else a fork no peer can seed would alternate between the two, logging both every cycle.
    private func damaged(_ reason: String) -> EtcdError {
        let isNew = state.withLock { state in
            if let current = state.damage, current.hasPrefix(reason) { return false }
            state.damage = reason
            return true
        }
        if isNew {
            logger.critical(
                "cluster replica is damaged", metadata: ["ledger.project": "\(project)", "reason": "\(reason)"])
        }
        return EtcdError(reason)
    }
}

/// A replica's history is not the cluster's (a seq past the tail, or one the cluster's next block does not
/// follow): its copy is kept aside and replaced by a peer's.
struct ReplicaForked: Error, CustomStringConvertible {
    let head: UInt64
    let reason: String
    var description: String { reason }

    /// The replica holds seqs past the cluster's tail.
    static func pastTail(head: UInt64, tail: UInt64) -> Self {
        Self(head: head, reason: "this replica holds seqs through \(head), past the cluster's tail \(tail) (a fork)")
    }

    /// The cluster's block after the head does not follow the head's hash.
    static func notFollowed(head: UInt64) -> Self {
        Self(head: head, reason: "the cluster's seq \(head + 1) does not follow this replica's seq \(head) (a fork)")
    }

    /// At the tail's seq, another hash.
    static func headDiffers(head: UInt64, tail: ReplicationTail) -> Self {
        Self(head: head, reason: "this replica's head \(head) does not match the cluster's tail \(tail) (a fork)")
    }

    /// The head falls inside one of the cluster's commits (a replica applies whole commits).
    static func insideCommit(head: UInt64, of block: ReplicatedBlock) -> Self {
        Self(
            head: head,
            reason:
                "this replica's head \(head) is inside the cluster's commit of seqs \(block.firstSeq)…\(block.lastSeq) (a fork)"
        )
    }
}

/// etcd no longer holds the blocks after a replica's head (trimmed): the replica must be seeded from a peer.
struct ReplicaBehind: Error, CustomStringConvertible {
    let head: UInt64
    /// The first seq etcd still holds.
    let firstHeld: UInt64

    var description: String {
        "the cluster's log was trimmed past this replica's head \(head) (etcd holds seqs from \(firstHeld))"
    }
}
