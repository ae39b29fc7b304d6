import APNsWire
import FCMWire
import Foundation
import LedgerCluster
import LedgerCore
import LedgerQueries
import LedgerStore
import Logging
import Synchronization

/// A topic's broadcast the main loop handed to the broadcast lane (``ProjectPusher/makeBroadcasts(_:)``), with what
/// its send says.
struct BroadcastJob: Sendable {
    var seq: UInt64
    var topic: TopicName
    /// The channel the send was recorded on (`sent.broadcast_channel_id`); `nil` for a send recorded before layout
    /// 13, whose channel is the topic's from before the send, as layout 12's builds took it.
    var channelID: String?
    var delivery: PlatformDelivery
    /// The message's iOS expiry, or its content's retention if that comes first.
    var expiresAt: LedgerTime
    var messageID: UInt64
}

extension ProjectPusher {
    /// The broadcast lane: makes the broadcasts the main loop hands over, one at a time in log order, each until it
    /// is recorded finished (a failed record is tried again every second, without asking Apple again); returns when
    /// cancelled (the main loop stopped) or when `jobs` ends.
    func makeBroadcasts(_ jobs: AsyncStream<BroadcastJob>) async {
        // The node no longer makes these broadcasts: it says nothing of them any more.
        defer { broadcastSettled(answered: false) }
        for await job in jobs {
            var lastError: String?
            while true {
                if Task.isCancelled { return }
                do {
                    let ledger = try await ledgers.ledger(for: project)
                    guard try await broadcast(job, in: ledger) else { return }
                    break
                } catch {
                    // Once per kind of failure, not once a second while it lasts.
                    let text = "\(error)"
                    if text != lastError {
                        logger.error(
                            "a broadcast could not be recorded, trying again every second: \(text)",
                            metadata: ["ledger.send_seq": "\(job.seq)", "apns.channel_id": "\(job.channelID ?? "")"])
                    }
                    lastError = text
                    do {
                        try await Task.sleep(for: .seconds(1))
                    } catch {
                        return
                    }
                }
            }
        }
    }

    /// The one broadcast of the topic's Live Activity send `job` (``APNsDestination/channel``), on the channel the
    /// topic had at the send (created before it, still held), recorded with Apple's answer and `apns-request-id` in
    /// one finishing `pushProgress` (``BroadcastOutcome``); `false` when stopped (cancelled) before an answer.
    ///
    /// `apns-expiration` is 0 on a channel that stores nothing (Apple refuses any other), else the message's iOS
    /// expiry. No answer, 429 and 5xx are tried again after 1 s doubling to ``PushSettlement/maximumRetryDelay``
    /// (or APNs' `Retry-After`), a refused provider token (403) every ``invalidTokenRetry``, until the message
    /// expires; every other answer is final. Each try is counted (`ledger_apns_broadcast_attempts_total`); while
    /// tries fail `/readyz` says so, with one error line when it starts and one notice when APNs answers again. The
    /// `apns-request-id` is the same on every attempt (``APNsPushID/broadcastUUID(project:seq:messageID:)``): a crash
    /// after Apple took it and before the record makes it again with that id. A broadcast not taken is counted and logged,
    /// without its payload.
    ///
    /// The record's settled seq is what ``PushSettlement/settled(finishingBroadcast:)`` allows, and the broadcast
    /// leaves the settlement only once its record is durable.
    func broadcast(_ job: BroadcastJob, in ledger: Ledger) async throws -> Bool {
        let seq = job.seq
        // A node that no longer leads the project makes no broadcast (the new leader does, from the log); one that
        // the log says is finished (recorded by another leader meanwhile) is not made again.
        guard isLeading else { return false }
        if try ledger.read({ try $0.pushProgress(ofSendAt: seq) })?.finished == true,
            unsavedBroadcast.withLock({ $0?.seq != seq })
        {
            settlement.withLock { $0.broadcastRecorded(seq) }
            return true
        }
        // The channel the send was recorded on, if the topic still has it (deleted since: the broadcast is not made);
        // for a send recorded before layout 13, the topic's channel from before the send.
        let channel = try ledger.read { try $0.liveActivityChannel(of: job.topic) }.flatMap { current in
            (job.channelID.map { current.channelID == $0 } ?? (current.createdSeq < seq)) ? current : nil
        }
        var outcome: BroadcastOutcome
        var expired = false
        var answered = false
        if let kept = unsavedBroadcast.withLock({ $0 }), kept.seq == seq {
            // Apple answered it already and only its record failed: the record is saved again, not the broadcast.
            outcome = kept.outcome
            expired = kept.expired
        } else if let channel, let client = try ledgers.apnsProviders.channels(for: project) {
            // Nothing owed on the broadcast endpoint once this one is done (answered, expired or stopped).
            defer { client.broadcastsIdle() }
            let expiration = channel.messageStoragePolicy == 0 ? 0 : max(0, job.expiresAt.microseconds / 1_000_000)
            let requestID = APNsPushID.broadcastUUID(project: project, seq: seq, messageID: job.messageID)
            let priority = job.delivery.priority == .high ? 10 : 5
            var failures = 0
            while true {
                guard isLeading else { return false }
                if LedgerTime.now() >= job.expiresAt {
                    expired = true
                    outcome = BroadcastOutcome(
                        channelID: channel.channelID, status: 0, reason: "expired before APNs took it")
                    break
                }
                let wait: Duration
                do {
                    let answer = try await client.broadcast(
                        channelID: channel.channelID, priority: priority, expiration: expiration,
                        requestID: requestID, payload: job.delivery.payloadJSON)
                    let reason = answer.reason ?? ""
                    if answer.status == 403 {
                        ledgers.metrics.recordBroadcastAttempt(outcome: "token_refused")
                        broadcastFails(
                            "APNs refuses its provider token (\(reason)); tried again every "
                                + "\(Self.invalidTokenRetry.components.seconds) s",
                            cause: "403 \(reason)", job: job)
                        wait = Self.invalidTokenRetry
                    } else if answer.status == 429 || answer.status >= 500 {
                        failures += 1
                        ledgers.metrics.recordBroadcastAttempt(outcome: "retry")
                        broadcastFails(
                            "APNs answers \(answer.status) \(reason); tried again with backoff",
                            cause: "\(answer.status) \(reason)", job: job)
                        wait = PushSettlement.retryDelay(afterFailures: failures, retryAfter: answer.retryAfter)
                    } else {
                        ledgers.metrics.recordBroadcastAttempt(outcome: answer.succeeded ? "accepted" : "rejected")
                        answered = true
                        outcome = BroadcastOutcome(
                            channelID: channel.channelID, status: UInt16(clamping: answer.status), reason: reason,
                            apnsRequestID: answer.requestID ?? requestID.uuidString.lowercased())
                        break
                    }
                } catch {
                    // Stopped (the lead ended, the server stops): not APNs' failure.
                    if Task.isCancelled { return false }
                    // No answer: the broadcast may or may not have arrived; the same request id goes again.
                    failures += 1
                    ledgers.metrics.recordBroadcastAttempt(outcome: "retry")
                    broadcastFails("no answer; tried again with backoff", cause: "\(error)", job: job)
                    wait = PushSettlement.retryDelay(afterFailures: failures, retryAfter: nil)
                }
                // Never past the message's expiry (an hour's Retry-After for a message that ends in a minute).
                let now = LedgerTime.now().microseconds
                let (remaining, overflow) = job.expiresAt.microseconds.subtractingReportingOverflow(now)
                let micros: Int64 = overflow ? (job.expiresAt.microseconds > now ? .max : 0) : max(0, remaining)
                let left = Duration.microseconds(micros)
                do {
                    try await Task.sleep(for: min(wait, left))
                } catch {
                    return false
                }
            }
        } else {
            outcome = BroadcastOutcome(
                channelID: job.channelID ?? channel?.channelID ?? "", status: 0,
                reason: channel == nil
                    ? "the channel the send was recorded on was deleted before the broadcast was made"
                    : "the project no longer broadcasts (apns.broadcast is off)")
        }
        broadcastSettled(answered: answered)
        unsavedBroadcast.withLock { $0 = (seq, outcome, expired) }
        // Never past where the main loop got, nor past another broadcast not recorded finished.
        let settled = settlement.withLock { $0.settled(finishingBroadcast: seq) }
        _ = try await ledger.append(
            WriteRequest(
                actor: "apns", requestID: RequestID.random(),
                operations: [
                    .recordPushProgress(
                        PushProgress(
                            sendSeq: seq, throughToken: nil, finished: true, expired: expired,
                            settledThrough: settled, broadcast: outcome))
                ]))
        // Only now, durable, may a settled seq pass it.
        settlement.withLock { $0.broadcastRecorded(seq) }
        unsavedBroadcast.withLock { $0 = nil }
        // Counted and logged once, when saved (a failed save is retried without asking Apple again).
        ledgers.metrics.recordBroadcast(outcome: expired ? "expired" : outcome.accepted ? "accepted" : "rejected")
        if !outcome.accepted {
            logger.error(
                "a broadcast was not taken: \(outcome.status == 0 ? "not made" : String(outcome.status)) \(outcome.reason)",
                metadata: [
                    "ledger.send_seq": "\(seq)", "apns.channel_id": "\(outcome.channelID)",
                    "apns.request_id": "\(outcome.apnsRequestID)",
                ])
        }
        return true
    }

    /// Whether this node makes the project's pushes: always alone, in a cluster while it leads the project.
    private var isLeading: Bool {
        ledgers.cluster.map { $0.isLeading(project) } ?? true
    }

    /// A try of `job` failed (`problem`, for `/readyz`, names no project, channel or path): reported, and one error
    /// line when the broadcasts start failing, with `cause` (the status and Apple's reason, or the error's kind),
    /// the channel and the send's seq — never the provider token or the payload.
    private func broadcastFails(_ problem: String, cause: String, job: BroadcastJob) {
        let (state, started) = failing.withLock { failing -> (APNsReports.State?, Bool) in
            guard failing.broadcastProblem != problem else { return (nil, false) }
            let started = failing.broadcastProblem == nil
            failing.broadcastProblem = problem
            return (failing.state, started)
        }
        if let state { ledgers.apns.report(state, for: project) }
        if started {
            logger.error(
                "APNs broadcasts fail: \(cause); the broadcast is tried again (1 s doubling to \(PushSettlement.maximumRetryDelay.components.seconds) s, or as Retry-After says) until its message expires, and the project's other pushes go on",
                metadata: ["ledger.send_seq": "\(job.seq)", "apns.channel_id": "\(job.channelID ?? "")"])
        }
    }

    /// The broadcast under way is done with APNs (`answered`: APNs gave it a final answer; else it expired, was not
    /// made, or the lane stopped): its failure is over, with one notice when APNs answered after failing.
    private func broadcastSettled(answered: Bool) {
        let (state, recovered) = failing.withLock { failing -> (APNsReports.State?, Bool) in
            guard failing.broadcastProblem != nil else { return (nil, false) }
            failing.broadcastProblem = nil
            return (failing.state, answered)
        }
        if let state { ledgers.apns.report(state, for: project) }
        if recovered { logger.notice("APNs answers broadcasts again") }
    }

    /// Whether the broadcast endpoint has left every broadcast unanswered for ``silenceLimit``
    /// (``APNsChannelClient/broadcastSilence``): said in `/readyz` and the metrics, with one error line when it
    /// starts and one notice when it answers again.
    func watchBroadcastSilence() {
        guard let client = try? ledgers.apnsProviders.channels(for: project) else { return }
        let notAnswering = client.broadcastSilence.map { $0 >= Self.silenceLimit } ?? false
        let changed = failing.withLock { failing -> APNsReports.State? in
            guard failing.broadcastsNotAnswering != notAnswering else { return nil }
            failing.broadcastsNotAnswering = notAnswering
            return failing.state
        }
        guard let changed else { return }
        ledgers.apns.report(changed, for: project)
        if notAnswering {
            logger.error(
                "APNs is not answering broadcasts: no answer for \(Self.silenceLimit.components.seconds) s; they are tried again until their messages expire"
            )
        } else {
            logger.notice("APNs's broadcast endpoint answers again")
        }
    }
}
