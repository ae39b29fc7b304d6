import Foundation
import LedgerCore
import LedgerStore
import Logging
import Synchronization
import FCMWire
import APNsWire
import LedgerQueries
import LedgerCluster

/// Pushes one project's sends to the APNs tokens their recipients held at the send, and records how far it
/// got in the ledger (`pushProgress` events), so that the outbox is a function of the log:
///
/// - the sends are taken in log order, after the last one every send before which is settled
///   (``LedgerSnapshot/pushesSettledThrough()``); a send whose progress says finished is skipped;
/// - a send's recipients are taken in instance order from after its recorded progress; those without an APNs
///   token at the send are passed at once; at most ``maximumInFlight`` pushes are under way;
/// - progress is appended every ``progressBatch`` outcomes or every second, and at the send's end, with the
///   refusals (a 410 also appends the registration's end, a `BadDeviceToken` the APNs token's clearing — never for
///   a Live Activity's push, whose refusal is of the activity's token alone: ``APNsDestination``);
/// - after a crash the pushes of the send under way that were not yet recorded are made again: the recipients
///   past the recorded progress — taken and not passed, or passed since the last record — are at most
///   ``maximumOpen`` (``maximumInFlight`` + ``progressBatch``): a push that takes long holds the walk back, and
///   what the window passes meanwhile is recorded; so at most that many duplicates, each with the same `apns-id`;
/// - nothing is pushed past the message's iOS expiry (its `apns-expiration`, FCM's 4 weeks by default);
/// - a topic's broadcast (``APNsDestination/channel``) is handed to the broadcast lane, which makes the broadcasts in
///   log order while the walk goes on (``PushSettlement``): one waiting on APNs holds back no device's push, and no
///   recorded settled seq passes one not recorded finished.
///
/// - Note: Never logs device tokens, registration tokens or payloads.
final class ProjectPusher: Sendable {
    static let maximumInFlight = 256
    /// Pushes handed to APNs together (``APNsClient/send(_:)-([APNsPush])``): one hop to a connection and one
    /// resumption for them all, rather than one each.
    static let pushBatch = 32
    static let progressBatch = 1000
    /// Recipients past the recorded progress: taken and not passed (``PushWindow/open``: pushes in flight, and
    /// answered ones behind a push still in flight), and passed since the last record. A crash makes at most these
    /// again, whatever APNs' latency, and however long one push takes.
    static let maximumOpen = maximumInFlight + progressBatch
    /// How long a push waits before trying again after APNs refused the project's provider token.
    static let invalidTokenRetry: Duration = .seconds(60)
    /// How long APNs may leave every request unanswered before `/readyz` says it is not answering.
    static let silenceLimit: Duration = .seconds(30)

    let project: ProjectID
    private let production: APNsClient
    private let sandbox: APNsClient
    let ledgers: LedgerRegistry
    let logger: Logger
    let failing = Mutex(Failing())
    /// Apple's answer to a broadcast whose record has not been saved yet (the append failed): the next attempt
    /// saves it rather than broadcasting again.
    let unsavedBroadcast = Mutex<(seq: UInt64, outcome: BroadcastOutcome, expired: Bool)?>(nil)
    /// How far the main loop got, and the broadcasts the lane owes: what either may record as settled.
    let settlement = Mutex(PushSettlement())

    /// Why pushes wait, and why broadcasts do, as `/readyz` and the metrics tell it.
    struct Failing {
        /// APNs refuses the provider token (or the settings cannot be used).
        var problem: String?
        var logged = false
        /// APNs has not answered for ``silenceLimit``.
        var notAnswering = false
        var outboxDepth = 0
        /// The send under way and the pushes it still owes (its recipients not yet walked, and those open).
        var current: (seq: UInt64, owed: Int)?
        /// Why the broadcast under way fails (no answer, 429, 5xx, a refused provider token), `nil` while it does not.
        var broadcastProblem: String?
        /// The broadcast endpoint has not answered for ``silenceLimit``.
        var broadcastsNotAnswering = false

        var state: APNsReports.State {
            APNsReports.State(
                problem: problem
                    ?? (notAnswering
                        ? "APNs is not answering (no answer for \(ProjectPusher.silenceLimit.components.seconds) s)"
                        : nil),
                outboxDepth: outboxDepth, notAnswering: notAnswering,
                broadcastProblem: broadcastProblem
                    ?? (broadcastsNotAnswering
                        ? "APNs is not answering broadcasts (no answer for \(ProjectPusher.silenceLimit.components.seconds) s)"
                        : nil))
        }
    }

    /// The project's `contentRetention` in seconds, or `nil`: a send older than it is not pushed (docs/server.md,
    /// *Retention*).
    private let contentRetention: Int64?

    /// - Parameters:
    ///   - contentRetention: the project's `contentRetention` in seconds (`nil`: never): a send older than it is
    ///     pushed no more, as an expired one.
    ///
    /// The provider token is the project's one (``APNsProviders``), kept beside its ledger and shared with its
    /// broadcast channel requests.
    init(
        project: ProjectID, settings: APNsSettings, contentRetention: Int64? = nil, ledgers: LedgerRegistry,
        logger: Logger
    ) throws {
        self.project = project
        self.contentRetention = contentRetention
        self.ledgers = ledgers
        var logger = logger
        logger[metadataKey: "ledger.project"] = "\(project)"
        self.logger = logger
        let roots = try settings.loadTrustRoots()
        let token = try ledgers.apnsProviders.token(for: project)
        let metrics = ledgers.metrics
        production = try APNsClient(
            endpoint: settings.endpoint, topic: settings.topic, providerToken: token, additionalTrustRoots: roots,
            logger: logger, attemptTimedOut: { metrics.recordPushTimeout() })
        sandbox = try APNsClient(
            endpoint: settings.sandboxEndpoint, topic: settings.topic, providerToken: token,
            additionalTrustRoots: roots, logger: logger, attemptTimedOut: { metrics.recordPushTimeout() })
    }

    /// Pushes until the task is cancelled, and watches whether APNs answers.
    func run() async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.watchSilence() }
            await push()
            group.cancelAll()
        }
    }

    /// Every second: the outbox's depth (``countOwed()``), and whether APNs has left every request unanswered for
    /// ``silenceLimit`` (a timeout, a connection that opens and never speaks) — said in `/readyz`, the metrics and
    /// one log line when it starts, and one when APNs answers again.
    private func watchSilence() async {
        while !Task.isCancelled {
            if let owed = try? await countOwed() { report(outboxDepth: owed) }
            let silence = [production.silence, sandbox.silence].compactMap { $0 }.max()
            let notAnswering = silence.map { $0 >= Self.silenceLimit } ?? false
            let changed = failing.withLock { failing -> APNsReports.State? in
                guard failing.notAnswering != notAnswering else { return nil }
                failing.notAnswering = notAnswering
                return failing.state
            }
            if let changed {
                ledgers.apns.report(changed, for: project)
                if notAnswering {
                    logger.error(
                        "APNs is not answering: no answer for \(Self.silenceLimit.components.seconds) s; pushes are retried until their messages expire"
                    )
                } else {
                    logger.notice("APNs answers again")
                }
            }
            watchBroadcastSilence()
            try? await Task.sleep(for: .seconds(1))
        }
    }

    /// The pushes owed: the send under way's, and at most each later send's recorded audience (whether or not
    /// each recipient holds an APNs token) — the depth counts pushes, not sends; a topic's broadcast is one push,
    /// whatever its audience. None on a node that does not lead the project.
    private func countOwed() async throws -> Int {
        if let cluster = ledgers.cluster, !cluster.isLeading(project) { return 0 }
        let ledger = try await ledgers.ledger(for: project)
        let current = failing.withLock { $0.current }
        // The broadcasts handed to the lane are at or before where the main loop got: one push each.
        let (passed, handed) = settlement.withLock { ($0.mainThrough, $0.unfinishedBroadcasts.count) }
        let cache = ledgers.delivery(for: project).sends
        return try ledger.read { snapshot in
            let after = try current?.seq ?? passed ?? snapshot.pushesSettledThrough()
            var owed = (current?.owed ?? 0) + handed
            for seq in try snapshot.sendSeqs(after: after, limit: 256) {
                owed +=
                    try Self.isBroadcast(sendAt: seq, cache: cache, in: snapshot)
                    ? 1 : Int(clamping: try snapshot.recordedRecipientCount(ofSendAt: seq) ?? 0)
            }
            return owed
        }
    }

    /// Whether the send at `seq` is a topic's broadcast (``APNsDestination/channel``): one push, not one each.
    static func isBroadcast(sendAt seq: UInt64, cache: SendCache, in snapshot: LedgerSnapshot) throws -> Bool {
        let sent = try cache.cached(at: seq)?.sent ?? snapshot.sentEvent(at: seq).1
        guard case .topic = sent.target else { return false }
        return sent.apnsDestination == .channel
    }

    /// Pushes each send in turn until the task is cancelled: while the node leads the project (always, outside a
    /// cluster), the main loop beside a broadcast lane of its own.
    private func push() async {
        while !Task.isCancelled {
            // In a cluster, the project's leader pushes; a new one resumes from the progress in the log. A
            // follower waits to be told of a change of leadership (and looks again at least every 5 s).
            if let cluster = ledgers.cluster {
                let generation = cluster.routingGeneration
                if !cluster.isLeading(project) {
                    _ = await cluster.waitForRoutingChange(after: generation, upTo: .seconds(5))
                    continue
                }
            }
            // The lane lives as long as the main loop's lead: both stop together, and the next lead starts from the
            // settled seq in the log, which is before every broadcast not recorded finished.
            let (broadcasts, lane) = AsyncStream.makeStream(of: BroadcastJob.self)
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await self.makeBroadcasts(broadcasts) }
                await pushWhileLeading(lane: lane)
                lane.finish()
                group.cancelAll()
            }
            settlement.withLock { $0 = PushSettlement() }
            failing.withLock { $0.current = nil }
        }
    }

    /// The main loop: the sends in log order from the settled seq, each pushed, or handed to `lane` when it is a
    /// broadcast; returns when cancelled or when the node no longer leads the project.
    private func pushWhileLeading(lane: AsyncStream<BroadcastJob>.Continuation) async {
        var position: UInt64?
        var lastError: String?
        let commits = ledgers.delivery(for: project).sendsCommitted
        while !Task.isCancelled {
            if let cluster = ledgers.cluster, !cluster.isLeading(project) { return }
            do {
                let ledger = try await ledgers.ledger(for: project)
                let start = try position ?? ledger.read { try $0.pushesSettledThrough() }
                if position == nil { settlement.withLock { $0.mainPassed(start) } }
                position = start
                let seqs = try ledger.read { try $0.sendSeqs(after: start, limit: 256) }
                guard !seqs.isEmpty else {
                    production.idle()
                    sandbox.idle()
                    // A commit wakes it; a second's poll covers sends written by another path (an import).
                    await commits.wait(upTo: .seconds(1))
                    continue
                }
                for seq in seqs {
                    let pushed = try await push(sendAt: seq, settledThrough: position ?? 0, lane: lane, in: ledger)
                    failing.withLock { $0.current = nil }
                    guard pushed else { return }
                    position = seq
                    settlement.withLock { $0.mainPassed(seq) }
                }
                lastError = nil
            } catch {
                // Once per kind of failure, not once a second while it lasts (a ledger another process holds).
                let text = "\(error)"
                if text != lastError { logger.error("APNs pushes paused, trying again every second: \(text)") }
                lastError = text
                try? await Task.sleep(for: .seconds(1))
            }
        }
    }

    func shutdown() async {
        await production.shutdown()
        await sandbox.shutdown()
    }

    private func report(outboxDepth: Int) {
        let state = failing.withLock { failing in
            failing.outboxDepth = outboxDepth
            return failing.state
        }
        ledgers.apns.report(state, for: project)
    }

    /// What one push came to, for the progress record (``APNsOutcome/interrupted`` until it has been sent).
    private struct Finished {
        var instance: InstanceID
        var token: RegistrationToken
        /// The token pushed to: the device's APNs token, or a Live Activity's.
        var apnsToken: APNsDeviceToken
        /// Pushed to a Live Activity's token: APNs' answer is about that token, not the device's.
        var liveActivity: Bool
        var outcome: APNsOutcome
    }

    /// Pushes the send at `seq` to every recipient still owed one; `false` when stopped (cancelled) before the
    /// end.
    ///
    /// A topic's broadcast is handed to `lane` (``PushSettlement/handed(_:)`` first) and counts as done here.
    private func push(
        sendAt seq: UInt64, settledThrough settled: UInt64, lane: AsyncStream<BroadcastJob>.Continuation,
        in ledger: Ledger
    ) async throws -> Bool {
        let cache = ledgers.delivery(for: project).sends
        let (prepared, progress, holdsTokens) = try ledger.read { snapshot in
            (
                try cache.send(at: seq, in: snapshot), try snapshot.pushProgress(ofSendAt: seq),
                try snapshot.holdsAPNsTokens()
            )
        }
        guard progress?.finished != true else { return true }
        let delivery = prepared.delivery(for: .ios)
        let destination = delivery.apnsDestination
        // A Live Activity's push goes to `<bundle id>.push-type.liveactivity` (LiveActivityMessage).
        let liveActivityTopic = destination.isLiveActivity ? LiveActivityMessage.topic(bundleID: production.topic) : nil
        // A send past the project's contentRetention (or whose content is forgotten) is pushed no more: expired.
        let retainedUntil =
            prepared.contentForgotten
            ? prepared.time
            : contentRetention.map {
                LedgerTime(
                    microseconds: prepared.time.microseconds.addingReportingOverflow(
                        $0.multipliedReportingOverflow(by: 1_000_000).partialValue
                    ).partialValue)
            }
        let expiresAt = min(prepared.expiry(platform: "ios"), retainedUntil ?? prepared.expiry(platform: "ios"))
        let messageID = prepared.sent.messageID
        // A topic's Live Activity send: one broadcast on the topic's channel, whatever its audience.
        if destination == .channel, case .topic(let topic) = prepared.sent.target {
            // The channel recorded with the send (none for one recorded before layout 13: the lane finds it).
            settlement.withLock { $0.handed(seq) }
            lane.yield(
                BroadcastJob(
                    seq: seq, topic: topic, channelID: prepared.sent.broadcastChannelID, delivery: delivery,
                    expiresAt: expiresAt, messageID: messageID))
            return true
        }
        // No instance ever held an APNs token: nothing to push, and nothing to record (the next recorded
        // progress moves the settled seq past it).
        guard holdsTokens else { return true }
        var window = PushWindow()
        var after = progress.map(\.through).flatMap { $0 == 0 ? nil : $0 }
        // `endsToken`: APNs says the Live Activity's token is gone (410) or bad (400): a follower's activity token is
        // then unfollowed, if the device still follows the topic with it.
        var failures: [(failure: PushFailure, apnsToken: APNsDeviceToken, since: Int64?, endsToken: Bool)] = []
        // Recipients the window had passed at the last record: those passed since would be pushed again after a crash.
        var passedAtRecord = 0
        var lastRecord = ContinuousClock.now
        var expired = false
        var stopped = false
        var pushedAny = false
        // Recipients not yet walked, for the outbox depth (with the pushes open in the window).
        var unwalked = prepared.audience.count

        func record(finished: Bool) async throws {
            let passed = window.through
            let passedNow = window.passed
            guard passed != nil || finished || !failures.isEmpty else { return }
            var operations: [LedgerOperation] = []
            // A device erased since it was taken is named by its pseudonym now (its instance's token), and its
            // failures are left out: the token it had must not come back into the log.
            let (current, throughToken, known, following) = try ledger.read { snapshot in
                (
                    try failures.map { entry in
                        try snapshot.instanceID(of: entry.failure.token).flatMap { try snapshot.apnsTokenHeld(by: $0) }
                    },
                    try passed.flatMap { try snapshot.token(of: $0.instance) },
                    try failures.map { try snapshot.instanceID(of: $0.failure.token) != nil },
                    try failures.map { entry -> TopicName? in
                        // The follow the refused activity token stands for, if the device still follows with it.
                        guard entry.endsToken, case .topicFollowers(let topic) = destination,
                            let instance = try snapshot.instanceID(of: entry.failure.token),
                            let topicID = try snapshot.topicID(of: topic),
                            try snapshot.liveActivityToken(of: instance, scope: .topic(topicID))?.bytes
                                == entry.apnsToken.bytes
                        else { return nil }
                        return topic
                    }
                )
            }
            for (index, entry) in failures.enumerated() {
                let held = current[index]
                switch entry.failure.kind {
                case .unregistered:
                    // Unless the device's app set another APNs token after APNs says this one stopped.
                    // APNs' timestamp is milliseconds, from the network: multiplied without trapping (a time
                    // past the range is later than any token's).
                    if let held, held.token != entry.apnsToken,
                        entry.since.map({ since in
                            let (micros, overflow) = since.multipliedReportingOverflow(by: 1000)
                            return !overflow && held.since.microseconds > micros
                        }) ?? true
                    {
                        break
                    }
                    operations.append(.unregister(entry.failure.token, reason: "APNs: \(entry.failure.reason)"))
                case .badDeviceToken:
                    if held?.token == entry.apnsToken {
                        operations.append(.clearAPNsToken(entry.failure.token, reason: "APNs: \(entry.failure.reason)"))
                    }
                case .rejected:
                    // A follower's activity token APNs says is gone: that follow ends, not the registration.
                    if let topic = following[index] {
                        operations.append(
                            .unfollowLiveActivity(
                                entry.failure.token, topic, reason: "APNs: \(entry.failure.reason)",
                                ifPushToken: entry.apnsToken))
                    }
                }
            }
            operations.append(
                .recordPushProgress(
                    PushProgress(
                        sendSeq: seq, throughToken: throughToken, finished: finished, expired: expired,
                        failures: zip(failures, known).filter(\.1).map(\.0.failure),
                        // Never past a broadcast the lane has not recorded finished.
                        settledThrough: settlement.withLock { $0.settled(upTo: finished ? seq : settled) })))
            _ = try await ledger.append(
                WriteRequest(actor: "apns", requestID: RequestID.random(), operations: operations))
            failures.removeAll()
            passedAtRecord = passedNow
            lastRecord = .now
        }

        try await withThrowingTaskGroup(of: [Finished].self) { group in
            var inFlight = 0
            /// Pushes taken and not handed to APNs yet, for each client (production, sandbox).
            var pending: [Bool: [(recipient: Finished, push: APNsPush)]] = [:]
            func launch(sandboxed: Bool) {
                guard let batch = pending.removeValue(forKey: sandboxed), !batch.isEmpty else { return }
                let client = sandboxed ? sandbox : production
                group.addTask { [self] in
                    let outcomes = await send(batch.map(\.push), with: client)
                    return zip(batch, outcomes).map { taken, outcome in
                        var finished = taken.recipient
                        finished.outcome = outcome
                        return finished
                    }
                }
            }
            func launchAll() {
                launch(sandboxed: false)
                launch(sandboxed: true)
            }
            func settle(_ finished: Finished) {
                inFlight -= 1
                switch finished.outcome {
                case .accepted:
                    break
                case .unregistered(let since):
                    // A Live Activity's token that stopped (the activity ended, or its token changed) ends that
                    // token only: recorded as a refusal of this push, never the registration's end.
                    failures.append(
                        (
                            PushFailure(
                                token: finished.token, kind: finished.liveActivity ? .rejected : .unregistered,
                                status: 410, reason: "Unregistered"),
                            finished.apnsToken, since, finished.liveActivity
                        ))
                case .badDeviceToken(let reason):
                    // Likewise a bad activity token: the device's own APNs token is not cleared for it.
                    failures.append(
                        (
                            PushFailure(
                                token: finished.token, kind: finished.liveActivity ? .rejected : .badDeviceToken,
                                status: 400, reason: reason),
                            finished.apnsToken, nil, finished.liveActivity
                        ))
                case .rejected(let status, let reason):
                    failures.append(
                        (
                            PushFailure(
                                token: finished.token, kind: .rejected, status: UInt16(clamping: status), reason: reason
                            ),
                            finished.apnsToken, nil, false
                        ))
                case .expired:
                    expired = true
                    return  // owed, never pushed: the window does not pass it
                case .interrupted, .providerTokenInvalid:
                    stopped = true
                    return
                }
                window.finish(finished.instance)
            }

            issuing: while !stopped && !expired {
                if Task.isCancelled {
                    stopped = true
                    break
                }
                if LedgerTime.now() >= expiresAt {
                    expired = true
                    break
                }
                let ids = prepared.audience.ids(after: after, limit: 512)
                guard let last = ids.last else { break }
                after = last
                unwalked -= ids.count
                // The device's APNs token, or for a Live Activity message the activity's token (for a topic's, the
                // one the device followed the topic with, or its push-to-start token) in the device's environment;
                // none: nothing to push.
                let recipients = try ledger.read { snapshot in
                    try ids.map { id in
                        (
                            id, try snapshot.token(of: id),
                            try snapshot.pushToken(of: id, at: seq, destination: destination)
                        )
                    }
                }
                for (instance, token, pushToken) in recipients {
                    guard let token else { continue }
                    guard let apnsToken = pushToken else {
                        window.take(instance, token: token, done: true)
                        continue
                    }
                    // What a crash now would make again: the recipients taken and not passed (in flight, or answered
                    // behind one in flight), and those passed since the last record.
                    func unrecorded() -> Int { window.open + (window.passed - passedAtRecord) }
                    if inFlight >= Self.maximumInFlight || unrecorded() >= Self.maximumOpen { launchAll() }
                    // At most `maximumInFlight` pushes under way, and at most `maximumOpen` recipients unrecorded: a
                    // slow push holds the walk back, and what the window passes while it waits is recorded, rather
                    // than letting a crash repeat everything answered after it.
                    while inFlight >= Self.maximumInFlight || unrecorded() >= Self.maximumOpen {
                        if unrecorded() >= Self.maximumOpen, window.passed > passedAtRecord {
                            try await record(finished: false)
                            continue
                        }
                        guard inFlight > 0, let finished = try await group.next() else { break }
                        finished.forEach(settle)
                        if window.passed > passedAtRecord, ContinuousClock.now - lastRecord > .seconds(1) {
                            try await record(finished: false)
                        }
                    }
                    if stopped || expired { break issuing }
                    window.take(instance, token: token)
                    inFlight += 1
                    pushedAny = true
                    let push = APNsPush(
                        deviceToken: apnsToken.hex, pushType: delivery.pushType ?? "alert",
                        priority: delivery.priority == .high ? 10 : 5,
                        expiresAt: Double(expiresAt.microseconds) / 1_000_000,
                        collapseID: delivery.collapseKey.flatMap { $0.utf8.count <= 64 ? $0 : nil },
                        apnsID: APNsPushID.uuid(messageID: messageID, token: token), payload: delivery.payloadJSON,
                        topic: liveActivityTopic)
                    let recipient = Finished(
                        instance: instance, token: token, apnsToken: apnsToken,
                        liveActivity: destination.isLiveActivity, outcome: .interrupted)
                    pending[apnsToken.sandbox, default: []].append((recipient, push))
                    if pending[apnsToken.sandbox]?.count ?? 0 >= Self.pushBatch { launch(sandboxed: apnsToken.sandbox) }
                    if window.passed - passedAtRecord >= Self.progressBatch
                        || ContinuousClock.now - lastRecord > .seconds(1)
                    {
                        launchAll()  // not held back while the progress is committed
                        try await record(finished: false)
                    }
                }
                // What this read took goes out before the next read.
                launchAll()
                let owed = max(0, unwalked) + window.open
                failing.withLock { $0.current = (seq, owed) }
            }
            launchAll()
            while let finished = try await group.next() { finished.forEach(settle) }
        }
        if stopped {
            try await record(finished: false)
            return false
        }
        // A send none of whose recipients held an APNs token needs no event: the next recorded progress settles
        // it (a restart before then walks its audience again).
        if !pushedAny && progress == nil && failures.isEmpty && !expired { return true }
        try await record(finished: true)
        return true
    }

    /// Sends `pushes` together (``APNsClient/send(_:)-([APNsPush])``); those refused for the provider token go on
    /// alone through ``send(_:with:)``, which waits that out.
    private func send(_ pushes: [APNsPush], with client: APNsClient) async -> [APNsOutcome] {
        let started = ContinuousClock.now
        var outcomes = await client.send(pushes)
        var refused: [Int] = []
        for (index, outcome) in outcomes.enumerated() {
            if case .providerTokenInvalid = outcome {
                refused.append(index)
            } else {
                record(outcome, since: started)
            }
        }
        if refused.count < pushes.count { setProblem(nil) }
        guard !refused.isEmpty else { return outcomes }
        await withTaskGroup(of: (Int, APNsOutcome).self) { group in
            for index in refused { group.addTask { (index, await self.send(pushes[index], with: client)) } }
            for await (index, outcome) in group { outcomes[index] = outcome }
        }
        return outcomes
    }

    /// Counts a push's final outcome and how long it took (nothing for one interrupted or refused for the token).
    private func record(_ outcome: APNsOutcome, since started: ContinuousClock.Instant) {
        let name: String
        switch outcome {
        case .accepted: name = "accepted"
        case .unregistered: name = "unregistered"
        case .badDeviceToken: name = "bad_device_token"
        case .rejected: name = "rejected"
        case .expired: name = "expired"
        case .interrupted, .providerTokenInvalid: return
        }
        ledgers.metrics.recordPush(outcome: name, duration: .now - started)
    }

    /// Sends `push`, waiting out a refused provider token (reported in `/readyz`, a metric and one error line)
    /// until the push expires.
    private func send(_ push: APNsPush, with client: APNsClient) async -> APNsOutcome {
        let started = ContinuousClock.now
        while true {
            let outcome = await client.send(push)
            if case .providerTokenInvalid(let reason) = outcome {
                setProblem("APNs refuses its provider token (\(reason))")
                guard Date().timeIntervalSince1970 + 60 < push.expiresAt else {
                    ledgers.metrics.recordPush(outcome: "expired", duration: .now - started)
                    return .expired(lastReason: reason)
                }
                do {
                    try await Task.sleep(for: Self.invalidTokenRetry)
                } catch {
                    return .interrupted
                }
                continue
            }
            setProblem(nil)
            record(outcome, since: started)
            return outcome
        }
    }

    /// Records why APNs refuses the project (`nil`: it no longer does); logs the first refusal once.
    private func setProblem(_ problem: String?) {
        let (state, log) = failing.withLock { failing -> (APNsReports.State?, Bool) in
            guard failing.problem != problem else { return (nil, false) }
            failing.problem = problem
            let log = problem != nil && !failing.logged
            if log { failing.logged = true }
            if problem == nil { failing.logged = false }
            return (failing.state, log)
        }
        if let state { ledgers.apns.report(state, for: project) }
        if log, let problem {
            logger.error("APNs pushes wait: \(problem); they are kept until their messages expire")
        }
    }
}
