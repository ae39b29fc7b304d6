import EtcdAPI
import Foundation
import LedgerCore
import LedgerStore
import Logging
import ServiceLifecycle
import SwiftProtobuf
import Synchronization

/// This node's part in a cluster (docs/cluster.md): its membership under an etcd lease (``EtcdSession``), a
/// replica of each project placement gives it (``ProjectReplica``), and where each project's requests are
/// served (``route(_:isWrite:)``).
///
/// Made in this order, each given what it needs at init: the ``ReplicaGates``, then the server's ledgers opened
/// with them (a ``ReplicaHost``), then the node over both.
///
/// A `Service`: `ledger serve` runs it beside the HTTP server. At shutdown it stops its replicas and revokes
/// its lease, so that its leaderships pass at once instead of when the lease would expire.
///
/// - Note: Thread-safe.
public final class ClusterNode: Service, Sendable {
    private struct State {
        var replicas: [ProjectID: ProjectReplica] = [:]
        /// Each project's leader, as last read from etcd.
        var leaders: [ProjectID: String] = [:]
        /// The alarms etcd raised, as last read (`NOSPACE`, `CORRUPT`).
        var alarms: [String] = []
    }

    public let configuration: ClusterConfiguration
    public let projects: Set<ProjectID>
    let context: ClusterNodeContext
    private let gates: ReplicaGates
    private let state = Mutex(State())

    /// - Parameters:
    ///   - gates: the gates the host opened the ledgers with.
    ///   - host: the server that holds the ledgers of `projects`.
    /// - Throws: ``EtcdError`` when the configuration cannot be used.
    public init(
        configuration: ClusterConfiguration, projects: Set<ProjectID>, gates: ReplicaGates, host: any ReplicaHost,
        logger: Logger
    ) throws {
        if let problem = configuration.problem { throw EtcdError(problem) }
        self.configuration = configuration
        self.projects = projects
        let etcd = try EtcdClient(
            endpoints: configuration.etcdEndpoints,
            callTimeout: .milliseconds(max(500, configuration.leaseSeconds * 1000 / 3)))
        self.gates = gates
        context = ClusterNodeContext(
            configuration: configuration, etcd: etcd, routing: gates.routing, host: host, logger: logger)
    }

    public var nodeID: String { configuration.nodeID }

    // MARK: Routing

    /// Where a request for `project` is served: a write by the leader, a read by any holder (this node
    /// when it holds the project and its replica is sound).
    public func route(_ project: ProjectID, isWrite: Bool) -> ClusterRoute {
        let (replica, leader) = state.withLock { ($0.replicas[project], $0.leaders[project]) }
        if isWrite {
            if gates.isLeading(project) { return .local }
        } else if let replica, replica.status.caughtUp, !replica.status.replicaState.isStalled {
            return .local
        }
        let leaderID = replica?.status.leader ?? leader
        guard let leaderID else { return .unavailable("project \(project) has no leader yet") }
        if leaderID == nodeID {
            // Elected, and not yet leading (catching up), or a leftover of this node's previous run.
            return .unavailable("project \(project)'s leader is taking over")
        }
        guard let url = context.members[leaderID] else {
            return .unavailable("project \(project)'s leader \(leaderID) is not reachable")
        }
        return .forward(url: url)
    }

    /// A generation of what routes requests (leaders, this node's leaderships, the live members): it rises at
    /// each change. Read it, decide, then ``waitForRoutingChange(after:upTo:)`` to be told of the next change.
    public var routingGeneration: UInt64 { context.routing.level }

    /// Returns `true` once the routing changed after `generation`, `false` after `timeout` (or when cancelled).
    public func waitForRoutingChange(after generation: UInt64, upTo timeout: Duration) async -> Bool {
        await context.routing.wait(for: generation + 1, upTo: timeout)
    }

    /// Whether this node leads `project` now (work done once per project: pushes, checkpoints, sweeps).
    public func isLeading(_ project: ProjectID) -> Bool { gates.isLeading(project) }

    /// Whether this node holds a replica of `project`.
    public func holds(_ project: ProjectID) -> Bool { state.withLock { $0.replicas[project] != nil } }

    /// Why this node cannot serve fully, for `/readyz` (empty when it can).
    public var readinessProblems: [String] {
        var problems: [String] = []
        if let problem = context.session.problem {
            problems.append("this node's cluster membership is held by another process: \(problem)")
        } else if context.currentLease() == 0 {
            problems.append("this node has no etcd lease (is etcd reachable?)")
        }
        let (replicas, alarms) = state.withLock { (Array($0.replicas.values), $0.alarms) }
        for alarm in alarms { problems.append("etcd raised the alarm \(alarm)") }
        for replica in replicas {
            let status = replica.status
            if let damage = status.damage {
                problems.append("a project's replica is damaged: \(damage)")
            } else if let stalled = status.stalled {
                problems.append("a project's replica cannot apply the log: \(stalled)")
            } else if status.replicaState.isStalled {
                // The reason (an etcd or gRPC error) is for /v1/cluster and the log, behind credentials.
                problems.append(
                    "a project's replica is stalled: nothing applied for \(ReplicaProgress.stallAfter.components.seconds) s, "
                        + "\(status.progress.lagEvents) events behind the cluster's log (GET /v1/cluster names it)")
            }
        }
        return problems
    }

    /// The etcd alarms last seen (for metrics).
    public var alarms: [String] { state.withLock { $0.alarms } }

    /// How many events this node's replica of `project` lacks of the cluster's log (`nil` when it holds none).
    public func lagEvents(of project: ProjectID) -> UInt64? {
        state.withLock { $0.replicas[project] }?.status.progress.lagEvents
    }

    /// How many of this node's replicas are stalled (``ReplicaProgress/State/stalled(reason:)``).
    public var stalledReplicas: Int {
        state.withLock { Array($0.replicas.values) }.filter { $0.status.replicaState.isStalled }.count
    }

    // MARK: Running

    /// Runs the connections to etcd until ``run()`` ends (at shutdown) or the task is cancelled: call it, in a
    /// task of its own, before ``join()``, and keep it running as long as the node.
    public func runConnections() async throws { try await context.etcd.run() }

    /// Claims this node's id and advertise URL in the cluster, under a new lease: call once, before serving.
    ///
    /// A record left by this node's previous process (killed, so its lease was not revoked) is waited for until
    /// its lease expires; a live holder keeps renewing it.
    ///
    /// When etcd does not answer, the node starts without a membership (`/readyz` says so) and claims it once
    /// etcd answers (``run()``).
    ///
    /// - Throws: ``MembershipTaken`` naming the holder when a live process holds the id or the URL.
    public func join() async throws {
        do {
            try await context.session.open()
        } catch let taken as MembershipTaken {
            throw taken
        } catch {
            context.logger.warning(
                "etcd did not answer: this node joins the cluster once it does", metadata: ["error": "\(error)"])
        }
    }

    public func run() async throws {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.context.session.keep(whenLost: { self.gates.followAll() }) }
            group.addTask { await self.followMembers() }
            for project in projects { group.addTask { await self.followLeader(of: project) } }
            group.addTask { await self.placeReplicas() }
            try? await gracefulShutdown()
            // Every replica stops: its gate refuses from now on, and the lease's end hands its leaderships on.
            gates.followAll()
            await context.session.close()
            group.cancelAll()
            context.etcd.close()
        }
    }

    /// Runs a replica of each project placement gives this node (stopping those it no longer holds): again at
    /// each change of the routing — the members, a leader, this node's lease — and at least every 5 s, when it
    /// also reads etcd's alarms.
    private func placeReplicas() async {
        await withTaskGroup(of: Void.self) { group in
            var stops: [ProjectID: AsyncStream<Void>.Continuation] = [:]
            var lastAlarmCheck = ContinuousClock.now - .seconds(10)
            while !Task.isCancelled {
                let generation = context.routing.level
                if ContinuousClock.now - lastAlarmCheck >= .seconds(5) {
                    lastAlarmCheck = .now
                    await refreshAlarms()
                }
                // Placement counts the live members: none is placed before they have been read once.
                if context.currentLease() != 0, context.membersRead {
                    for project in projects.sorted(by: { $0.rawValue < $1.rawValue }) {
                        let held = context.holders(of: project).contains(nodeID)
                        if held, stops[project] == nil {
                            let replica = ProjectReplica(
                                project: project, gate: gates.replicaGate(for: project), node: context)
                            state.withLock { $0.replicas[project] = replica }
                            let (stopped, stop) = AsyncStream.makeStream(of: Void.self)
                            stops[project] = stop
                            group.addTask {
                                await withTaskGroup(of: Void.self) { lifetime in
                                    lifetime.addTask { await replica.run() }
                                    lifetime.addTask { for await _ in stopped {} }
                                    await lifetime.next()
                                    lifetime.cancelAll()
                                }
                            }
                        } else if !held, let stop = stops.removeValue(forKey: project) {
                            context.logger.notice(
                                "this node no longer holds project", metadata: ["ledger.project": "\(project)"])
                            let replica = state.withLock { $0.replicas.removeValue(forKey: project) }
                            let role = replica?.gate.currentRole ?? .following
                            stop.finish()
                            await replica?.resign(from: role)
                        }
                    }
                }
                _ = await context.routing.wait(for: generation + 1, upTo: .seconds(5))
            }
            for stop in stops.values { stop.finish() }
            group.cancelAll()
        }
    }

    /// Follows the live members: reads them, then watches their keys and reads them again at each change (a
    /// node that joined, a lease that ended). A change raises the routing watermark, which wakes placement.
    private func followMembers() async {
        while !Task.isCancelled {
            do {
                let revision = try await readMembers()
                for try await _ in context.etcd.watch(prefix: context.keys.members, fromRevision: revision + 1) {
                    _ = try await readMembers()
                }
            } catch is CancellationError {
                return
            } catch {
                context.logger.debug("cluster membership could not be read", metadata: ["error": "\(error)"])
            }
            try? await Task.sleep(for: .milliseconds(500))
        }
    }

    /// Reads the live members; the revision read at.
    private func readMembers() async throws -> Int64 {
        let response = try await context.etcd.list(prefix: context.keys.members)
        var members: [String: String] = [:]
        for kv in response.kvs {
            guard let member = try? Topicledger_Cluster_ClusterMember(serializedBytes: kv.value) else { continue }
            members[member.id] = member.url
        }
        if context.setMembers(members) { context.routing.bump() }
        return response.header.revision
    }

    /// Follows `project`'s election key, for routing on a node that holds no replica of it: reads it, then
    /// watches it. A change raises the routing watermark.
    private func followLeader(of project: ProjectID) async {
        let key = context.keys.leader(project)
        while !Task.isCancelled {
            do {
                let (value, revision) = try await context.etcd.get(key)
                setLeader(value.map { String(decoding: $0.value, as: UTF8.self) }, of: project)
                for try await response in context.etcd.watch(prefix: key, fromRevision: revision + 1) {
                    for event in response.events {
                        setLeader(
                            event.type == .delete ? nil : String(decoding: event.kv.value, as: UTF8.self), of: project)
                    }
                }
            } catch is CancellationError {
                return
            } catch {
                context.logger.debug(
                    "a project's leader could not be read",
                    metadata: ["ledger.project": "\(project)", "error": "\(error)"])
            }
            try? await Task.sleep(for: .milliseconds(500))
        }
    }

    private func setLeader(_ leader: String?, of project: ProjectID) {
        let changed = state.withLock { state in
            defer { state.leaders[project] = leader }
            return state.leaders[project] != leader
        }
        if changed { context.routing.bump() }
    }

    private func refreshAlarms() async {
        guard let alarms = try? await context.etcd.alarms() else { return }
        state.withLock { state in
            state.alarms = alarms.map { alarm in
                switch alarm.alarm {
                case .nospace: "NOSPACE"
                case .corrupt: "CORRUPT"
                default: "\(alarm.alarm)"
                }
            }
        }
    }

    // MARK: Status

    /// The cluster as etcd and this node see it: members, and each project's leader and replicas' progress.
    public func status(of projects: Set<ProjectID>? = nil) async throws -> ClusterStatus {
        try await Self.status(etcd: context.etcd, keys: context.keys, projects: projects ?? self.projects)
    }

    /// Reports that this node cosigned `project`'s checkpoint of `size` with the key `vkey` (under its lease:
    /// the report goes with the node).
    public func reportCosigned(_ project: ProjectID, size: UInt64, vkey: String) async throws {
        let value = try JSONEncoder().encode(ReplicaCosignature(size: size, vkey: vkey))
        try await context.etcd.put(
            context.keys.cosigned(project, node: nodeID), Array(value), lease: context.currentLease())
    }

    /// The status read from etcd alone (`ledger cluster status`).
    public static func status(etcd: EtcdClient, keys: ClusterKeys, projects: Set<ProjectID>?) async throws
        -> ClusterStatus
    {
        let memberKeys = try await etcd.list(prefix: keys.members)
        var nodes: [String: ClusterStatus.Node] = [:]
        for kv in memberKeys.kvs {
            guard let member = try? Topicledger_Cluster_ClusterMember(serializedBytes: kv.value) else { continue }
            nodes[member.id] = ClusterStatus.Node(id: member.id, url: member.url, alive: true)
        }
        let everything = try await etcd.list(prefix: keys.prefix + "projects/", keysOnly: true)
        var names = Set(everything.kvs.compactMap { keys.projectName(in: String(decoding: $0.key, as: UTF8.self)) })
        if let projects { names = names.intersection(projects.map(\.rawValue)).union(projects.map(\.rawValue)) }
        var statuses: [ClusterStatus.Project] = []
        for name in names.sorted() {
            guard let project = try? ProjectID(name) else { continue }
            let leader = try await etcd.get(keys.leader(project)).value.map {
                String(decoding: $0.value, as: UTF8.self)
            }
            let tail = try await etcd.get(keys.tail(project)).value.flatMap { try? ReplicationTail(decoding: $0.value) }
            let applied = try await etcd.appliedPositions(of: project, keys: keys)
            let states = try await etcd.replicaStates(of: project, keys: keys)
            let cosigned = try await etcd.cosignatures(of: project, keys: keys)
            var replicas: [ClusterStatus.Replica] = []
            // A replica that has reported its state but never its head (it applied nothing) is shown at seq 0.
            for node in Set(applied.keys).union(states.keys).sorted() {
                let position = applied[node] ?? ReplicationTail(seq: 0, hash: HashChain.genesis)
                let lag = (tail?.seq ?? 0) > position.seq ? (tail?.seq ?? 0) - position.seq : 0
                replicas.append(
                    ClusterStatus.Replica(
                        node: node, appliedSeq: position.seq, headHash: position.hash.hexString,
                        state: states[node] ?? (lag == 0 ? "current" : "catching up"), lagEvents: lag,
                        cosignedSize: cosigned[node]?.size, cosignerKey: cosigned[node]?.vkey))
                if nodes[node] == nil { nodes[node] = ClusterStatus.Node(id: node, url: "", alive: false) }
            }
            statuses.append(ClusterStatus.Project(project: name, leader: leader, replicas: replicas))
        }
        return ClusterStatus(nodes: nodes.values.sorted { $0.id < $1.id }, projects: statuses)
    }
}
