import Hummingbird
import LedgerCore
import LedgerStore
import Prometheus

/// The server's Prometheus metrics (SPEC §4 item 6): requests by route and status, events appended,
/// group-commit batch sizes and commit latency. Served at `GET /metrics`.
///
/// Labels carry route patterns (`/v1/projects/{project}/registrations/{token}/…`), never request URIs,
/// which hold registration tokens.
///
/// - Note: Thread-safe.
public final class ServerMetrics: Sendable {
    let registry = PrometheusCollectorRegistry()
    private let batchRequests: ValueHistogram
    private let batchOperations: ValueHistogram
    private let commitDuration: DurationHistogram
    private let operationsCommitted: Counter
    /// `ledger_apns_pushes_total` by each final outcome a push has (``recordPush(outcome:duration:)``), made once:
    /// a fan-out records one per push.
    private let pushOutcomes: [String: Counter]
    private let pushDuration: DurationHistogram

    /// The final outcomes of a push.
    static let pushOutcomeNames = ["accepted", "unregistered", "bad_device_token", "rejected", "expired"]

    public init() {
        batchRequests = registry.makeValueHistogram(
            name: "ledger_group_commit_requests", buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 1024],
            help: "Requests per group-commit transaction")
        batchOperations = registry.makeValueHistogram(
            name: "ledger_group_commit_operations", buckets: [1, 4, 16, 64, 256, 1000, 4000, 20000],
            help: "Operations per group-commit transaction")
        commitDuration = registry.makeDurationHistogram(
            name: "ledger_commit_duration_seconds",
            buckets: [
                .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10),
                .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(500),
            ],
            help: "Time of a durable write transaction, fsync included")
        operationsCommitted = registry.makeCounter(
            name: "ledger_operations_committed_total",
            help: "Operations in committed transactions (each appends one event unless rejected)")
        var pushOutcomes: [String: Counter] = [:]
        for outcome in Self.pushOutcomeNames {
            pushOutcomes[outcome] = registry.makeCounter(
                name: "ledger_apns_pushes_total", labels: [("outcome", outcome)], help: "APNs pushes by final outcome")
        }
        self.pushOutcomes = pushOutcomes
        pushDuration = registry.makeDurationHistogram(
            name: "ledger_apns_push_duration_seconds",
            buckets: [
                .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100),
                .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(5), .seconds(30), .seconds(300),
            ],
            help: "Time from a push's first attempt to its final outcome")
        prepareExpirySweeps()
        prepareRetention()
        prepareBroadcasts()
    }

    /// The help of `ledger_apns_channel_requests_total`, the same wherever its series are made.
    static let channelRequestsHelp =
        "Broadcast channel creations and deletions at APNs by outcome: succeeded, refused, failed, unknown"

    /// Makes the broadcast channel series at zero (each operation and outcome), so that they are served before the
    /// first channel change or broadcast, and a first refusal is an increase an alert can see.
    private func prepareBroadcasts() {
        // `unknown` is a creation's only: a deletion whose outcome is unknown leaves the channel in the ledger, to
        // delete again.
        let operations = [
            ("create", ["succeeded", "refused", "failed", "unknown"]), ("delete", ["succeeded", "refused", "failed"]),
        ]
        for (operation, outcomes) in operations {
            for outcome in outcomes {
                registry.makeCounter(
                    name: "ledger_apns_channel_requests_total",
                    labels: [("operation", operation), ("outcome", outcome)],
                    help: Self.channelRequestsHelp
                ).increment(by: Int64(0))
            }
        }
        for outcome in ["accepted", "rejected", "expired"] {
            registry.makeCounter(
                name: "ledger_apns_broadcasts_total", labels: [("outcome", outcome)],
                help: "Broadcasts on topics' Live Activity channels by outcome: accepted, rejected, expired"
            ).increment(by: Int64(0))
        }
        for outcome in Self.broadcastAttemptOutcomes {
            registry.makeCounter(
                name: "ledger_apns_broadcast_attempts_total", labels: [("outcome", outcome)],
                help: Self.broadcastAttemptsHelp
            ).increment(by: Int64(0))
        }
    }

    /// What one try of a broadcast came to: `accepted` (2xx), `rejected` (a final refusal), `retry` (no answer, 429
    /// or 5xx: tried again with backoff), `token_refused` (403 for the provider token: tried again after 60 s).
    static let broadcastAttemptOutcomes = ["accepted", "rejected", "retry", "token_refused"]
    private static let broadcastAttemptsHelp =
        "Tries of broadcasts at APNs by outcome: accepted, rejected, retry (no answer, 429, 5xx), token_refused"

    /// Records one group commit (the store's commit observer).
    func recordCommit(requests: Int, operations: Int, duration: Duration) {
        batchRequests.record(Double(requests))
        batchOperations.record(Double(operations))
        commitDuration.record(duration)
        operationsCommitted.increment(by: Int64(operations))
    }

    /// Counts the devices one erasure request erased (`ledger_erasures_total{kind="erased"}`) and how long it
    /// took, the compaction of the file included.
    func recordErasure(devices: Int, duration: Duration) {
        registry.makeCounter(
            name: "ledger_erasures_total", labels: [("kind", "erased")],
            help: "Devices whose identifiers were erased (erased), or whose registrations expired (expired)"
        ).increment(by: Int64(devices))
        registry.makeDurationHistogram(
            name: "ledger_erasure_duration_seconds",
            buckets: [
                .milliseconds(10), .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500),
                .seconds(1), .seconds(2), .seconds(5), .seconds(10), .seconds(30),
            ],
            help:
                "Time of an erasure request: the rewrite of the events naming the devices and the compaction of the file"
        ).record(duration)
    }

    /// Counts the registrations one expiry sweep expired (`ledger_erasures_total{kind="expired"}`).
    func recordExpiry(devices: Int) {
        registry.makeCounter(
            name: "ledger_erasures_total", labels: [("kind", "expired")],
            help: "Devices whose identifiers were erased (erased), or whose registrations expired (expired)"
        ).increment(by: Int64(devices))
    }

    /// Counts the contents of sends one retention sweep forgot (`ledger_retention_contents_forgotten_total`).
    func recordRetention(contents: Int) {
        registry.makeCounter(
            name: "ledger_retention_contents_forgotten_total",
            help: "Contents of sends forgotten by the project's contentRetention"
        ).increment(by: Int64(contents))
    }

    /// Counts the devices one retention sweep erased (`ledger_retention_devices_erased_total`).
    func recordRetention(devices: Int) {
        registry.makeCounter(
            name: "ledger_retention_devices_erased_total",
            help: "Devices erased by the project's identifierRetention (their registration ended longer ago)"
        ).increment(by: Int64(devices))
    }

    /// Makes the retention series at zero, so that they are served (and a first failed sweep is an increase an
    /// alert can see) before any sweep ran.
    private func prepareRetention() {
        recordRetention(contents: 0)
        recordRetention(devices: 0)
        for failed in [false, true] {
            registry.makeCounter(
                name: "ledger_retention_sweeps_total", labels: [("outcome", failed ? "failed" : "completed")],
                help: "Retention sweeps (contentRetention, identifierRetention) by outcome: completed, failed"
            ).increment(by: Int64(0))
        }
    }

    /// Counts one retention sweep (`ledger_retention_sweeps_total{outcome}`): `completed` or `failed`.
    func recordRetentionSweep(failed: Bool) {
        registry.makeCounter(
            name: "ledger_retention_sweeps_total", labels: [("outcome", failed ? "failed" : "completed")],
            help: "Retention sweeps (contentRetention, identifierRetention) by outcome: completed, failed"
        ).increment()
    }

    /// Counts one expiry sweep by what became of it (`ledger_expiry_sweeps_total{outcome}`): `completed`,
    /// `skipped` (a replica of a cluster did not say which devices it heard from: nobody expired) or `failed`.
    func recordExpirySweep(_ outcome: RegistrationExpirySweeper.Outcome) {
        let label =
            switch outcome {
            case .completed: "completed"
            case .skipped: "skipped"
            case .failed: "failed"
            }
        registry.makeCounter(
            name: "ledger_expiry_sweeps_total", labels: [("outcome", label)],
            help: "Registration expiry sweeps: completed, skipped (a replica did not answer: nobody expired), failed"
        ).increment()
    }

    /// Makes each outcome's expiry-sweep series at zero, so that the first skipped or failed sweep is an increase
    /// an alert can see (``recordExpirySweep(_:)``).
    private func prepareExpirySweeps() {
        for outcome in ["completed", "skipped", "failed"] {
            registry.makeCounter(
                name: "ledger_expiry_sweeps_total", labels: [("outcome", outcome)],
                help:
                    "Registration expiry sweeps: completed, skipped (a replica did not answer: nobody expired), failed"
            ).increment(by: Int64(0))
        }
    }

    /// Sets the storage gauges before a scrape: the open projects whose file owes a compaction after an erasure
    /// (freed pages may still hold what was erased), the fullest project's map, and the data directory's file
    /// system. No series carries a project id (`/metrics` needs no credential).
    func recordStorage(
        compactionsOwed: Int, erasureJournalsOwed: Int, mapUsedFraction: Double,
        disk: (available: UInt64, size: UInt64)?
    ) {
        registry.makeGauge(
            name: "topicledger_compactions_owed",
            help: "Open projects whose file could not be compacted after an erasure (tried again before each write)"
        ).set(Double(compactionsOwed))
        registry.makeGauge(
            name: "topicledger_erasure_journals_owed",
            help: "Open projects with erasures not yet in erasures.jsonl (a restore would not apply them again)"
        ).set(Double(erasureJournalsOwed))
        registry.makeGauge(
            name: "topicledger_map_used_ratio",
            help: "The fullest open project's LMDB file in use over the largest map it may grow to (1 TiB)"
        ).set(mapUsedFraction)
        guard let disk else { return }
        registry.makeGauge(
            name: "topicledger_disk_available_bytes",
            help: "Bytes the server may still write on the file system of its data directory"
        ).set(Double(disk.available))
        registry.makeGauge(
            name: "topicledger_disk_size_bytes", help: "Size of the file system of the server's data directory"
        ).set(Double(disk.size))
    }

    /// Counts one answered request.
    func recordRequest(route: String, method: String, status: Int) {
        registry.makeCounter(
            name: "ledger_http_requests_total",
            labels: [("route", route), ("method", method), ("status", String(status))],
            help: "HTTP requests by route pattern, method and status"
        ).increment()
    }

    /// Sets the events gauge (the sum of the open projects' head seqs) before a scrape. No series carries a
    /// project id: `/metrics` needs no credential, and which projects exist is never revealed to strangers.
    /// A project's own numbers are at `GET /v1/projects/{p}/metrics`, behind its admin or auditor key.
    func recordEvents(_ total: UInt64, pendingAudiences: Int) {
        registry.makeGauge(name: "ledger_events", help: "Events in the logs of the open projects").set(Double(total))
        registry.makeGauge(
            name: "ledger_audiences_pending",
            help: "Sends committed whose audience event is not recorded yet (grows while sends outpace hashing)"
        ).set(Double(pendingAudiences))
    }

    /// Counts one push with its final outcome (`accepted`, `unregistered`, `bad_device_token`, `rejected`,
    /// `expired`) and records how long it took, retries included.
    func recordPush(outcome: String, duration: Duration) {
        (pushOutcomes[outcome]
            ?? registry.makeCounter(
                name: "ledger_apns_pushes_total", labels: [("outcome", outcome)], help: "APNs pushes by final outcome"))
            .increment()
        pushDuration.record(duration)
    }

    /// Counts one push attempt APNs left unanswered in time (`outcome="timeout"`); it is tried again until its
    /// message expires, so the push also counts, later, under its final outcome.
    func recordPushTimeout() {
        registry.makeCounter(
            name: "ledger_apns_pushes_total", labels: [("outcome", "timeout")],
            help: "APNs pushes by final outcome"
        ).increment()
    }

    /// Counts one change of a topic's broadcast channel (`ledger_apns_channel_requests_total{operation,outcome}`):
    /// `operation` `create` or `delete`; `outcome` `succeeded` (done at Apple and recorded), `refused` (Apple
    /// refused it, or the ledger did before asking: the channel limit), `failed` (Apple did not answer, or the
    /// ledger could not record what Apple did), or `unknown` (a creation: the request reached a connection to Apple
    /// and no answer came, so Apple may hold a channel the ledger never recorded).
    func recordChannelRequest(operation: String, outcome: String) {
        registry.makeCounter(
            name: "ledger_apns_channel_requests_total", labels: [("operation", operation), ("outcome", outcome)],
            help: Self.channelRequestsHelp
        ).increment()
    }

    /// Counts one broadcast of a topic's Live Activity send by its recorded outcome
    /// (`ledger_apns_broadcasts_total{outcome}`): `accepted`, `rejected` (Apple refused it, or the topic had no
    /// channel any more) or `expired` (never made before the message expired).
    func recordBroadcast(outcome: String) {
        registry.makeCounter(
            name: "ledger_apns_broadcasts_total", labels: [("outcome", outcome)],
            help: "Broadcasts on topics' Live Activity channels by outcome: accepted, rejected, expired"
        ).increment()
    }

    /// Counts one try of a broadcast (`ledger_apns_broadcast_attempts_total{outcome}`, one of
    /// ``broadcastAttemptOutcomes``); the broadcast's recorded outcome counts once more, in
    /// ``recordBroadcast(outcome:)``.
    func recordBroadcastAttempt(outcome: String) {
        registry.makeCounter(
            name: "ledger_apns_broadcast_attempts_total", labels: [("outcome", outcome)],
            help: Self.broadcastAttemptsHelp
        ).increment()
    }

    /// Sets the APNs gauges: pushes owed now (the recipients of the sends in the outboxes not yet passed),
    /// and how many projects' APNs credentials APNs refuses, or APNs does not answer.
    func recordAPNs(outboxDepth: Int, failingProjects: Int) {
        registry.makeGauge(
            name: "ledger_apns_outbox_depth",
            help: "Pushes owed: the recipients not yet pushed of the sends waiting for APNs (with the pushes open)"
        ).set(Double(outboxDepth))
        registry.makeGauge(
            name: "ledger_apns_failing_projects",
            help: "Projects whose APNs provider token APNs refuses, or whose APNs endpoint does not answer"
        ).set(Double(failingProjects))
    }

    /// Counts events a cluster's node rolled back: committed ahead of etcd, never taken by it, never acknowledged.
    /// Sets the witnesses' gauges before a scrape: the projects whose last checkpoint missed its witnesses'
    /// quorum, and for each witness (by its key name, never a project) whether its last answer was a
    /// cosignature. `/readyz` says why each failing witness fails.
    func recordWitnesses(_ reports: some Sequence<CheckpointWitnesses.Report>) {
        var missing = 0
        var failing: [String: Bool] = [:]
        for report in reports {
            if report.quorumMissing { missing += 1 }
            for status in report.statuses where status.problem != nil || failing[status.name] == nil {
                failing[status.name] = status.problem != nil
            }
        }
        registry.makeGauge(
            name: "topicledger_witness_quorum_missing",
            help: "Projects whose last checkpoint was not cosigned by its witnesses' quorum (their checkpoints: 503)"
        ).set(Double(missing))
        for (name, isFailing) in failing {
            registry.makeGauge(
                name: "topicledger_witness_failing", labels: [("witness", name)],
                help: "Whether the witness's last answer was not a valid cosignature (1) or was (0)"
            ).set(Double(isFailing ? 1 : 0))
        }
    }

    func recordRollBack(events: UInt64) {
        registry.makeCounter(
            name: "topicledger_cluster_rolled_back_events_total",
            help: "Events this node committed ahead of etcd that etcd did not take, rolled back (never acknowledged)"
        ).increment(by: Int64(clamping: events))
    }

    /// Sets the cluster's gauges: the etcd alarms raised (`NOSPACE`, `CORRUPT`), one series each, 1 when raised.
    /// A stalled replica is counted here without its project (this route needs no credential); the project's
    /// own metrics route has its lag, labelled.
    func recordCluster(alarms: [String], leading: Int, holding: Int, stalled: Int) {
        for alarm in ["NOSPACE", "CORRUPT"] {
            registry.makeGauge(
                name: "topicledger_etcd_alarms", labels: [("alarm", alarm)],
                help: "Whether etcd has raised the alarm (1) or not (0)"
            ).set(Double(alarms.contains(alarm) ? 1 : 0))
        }
        registry.makeGauge(name: "topicledger_cluster_projects_leading", help: "Projects this node leads")
            .set(Double(leading))
        registry.makeGauge(name: "topicledger_cluster_projects_held", help: "Projects this node holds a replica of")
            .set(Double(holding))
        registry.makeGauge(
            name: "topicledger_replicas_stalled",
            help: "Replicas on this node that cannot apply their project's log (GET /v1/cluster names them)"
        ).set(Double(stalled))
    }

    /// One project's series in the Prometheus text format (for its authenticated metrics route).
    /// In a cluster, `lagEvents` is this node's replica's lag, as `topicledger_replica_lag_events{project}`; with
    /// APNs, `apns` its outbox and whether APNs answers.
    static func projectExposition(
        _ statistics: LedgerStatistics, project: ProjectID, lagEvents: UInt64?, apns: APNsReports.State?
    ) -> [UInt8] {
        let series: [(String, String, String)] = [
            ("ledger_project_events", "Events in the project's log", String(statistics.events)),
            ("ledger_project_instances_registered", "Registered instances now", String(statistics.registeredInstances)),
            ("ledger_project_topics", "Topics ever subscribed to", String(statistics.topics)),
            ("ledger_project_subscriptions", "Subscriptions now", String(statistics.subscriptions)),
            ("ledger_project_messages", "Messages sent", String(statistics.messages)),
            ("ledger_project_used_bytes", "Bytes of the ledger file in use", String(statistics.usedBytes)),
        ]
        var text = ""
        var all = series
        if let apns {
            all.append(("ledger_project_apns_outbox_depth", "Pushes owed to APNs", String(apns.outboxDepth)))
            all.append(
                (
                    "ledger_project_apns_not_answering", "Whether APNs has left every request unanswered for 30 s",
                    apns.notAnswering ? "1" : "0"
                ))
            all.append(
                (
                    "ledger_project_apns_broadcasts_failing",
                    "Whether the broadcast under way is failing at APNs (no answer, 429, 5xx, a refused provider token)",
                    apns.broadcastProblem != nil ? "1" : "0"
                ))
        }
        for (name, help, value) in all {
            text += "# HELP \(name) \(help)\n# TYPE \(name) gauge\n\(name) \(value)\n"
        }
        if let lagEvents {
            // A project id is letters, digits, ".", "_" and "-" (ProjectID): nothing to escape in a label value.
            text += "# HELP topicledger_replica_lag_events Events of the cluster's log this node's replica lacks\n"
            text += "# TYPE topicledger_replica_lag_events gauge\n"
            text += "topicledger_replica_lag_events{project=\"\(project.rawValue)\"} \(lagEvents)\n"
        }
        return Array(text.utf8)
    }

    /// The Prometheus text exposition.
    func exposition() -> [UInt8] { registry.emitToBuffer() }
}

/// Counts every request by its matched route pattern and final status.
struct MetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: ServerMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws
        -> Response
    {
        do {
            let response = try await next(request, context)
            record(request, context, status: response.status.code)
            return response
        } catch let error as any HTTPResponseError {
            record(request, context, status: error.status.code)
            throw error
        } catch {
            record(request, context, status: 500)
            throw error
        }
    }

    private func record(_ request: Request, _ context: Context, status: Int) {
        metrics.recordRequest(
            route: context.endpointPath ?? "unmatched", method: request.method.rawValue, status: status)
    }
}
