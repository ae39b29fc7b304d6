import LMDBKit
import LedgerCore

/// The state a ``LogAppender`` checks operations against and folds events into: the projections, with the
/// questions only the appender asks.
package protocol AppenderProjection: LedgerProjection {
    /// The seq at which `instance` joined `topic`, or `nil` when it is not subscribed.
    mutating func subscribedSince(_ topic: TopicID, instance: InstanceID) throws -> UInt64?
    /// How many topics `instance` holds now.
    mutating func topicCount(of instance: InstanceID) throws -> Int
    /// The seqs of message `messageID`'s send and audience, or `nil` when no such message was sent.
    mutating func messageState(_ messageID: UInt64) throws -> MessageState?
    /// The id of the message sent last (the send with the highest seq), or 0 when nothing was sent.
    mutating func lastSentMessageID() throws -> UInt64
    /// Takes `instance` as the id of `token` without searching for it (``WriteRequest/resolvedInstances``).
    mutating func remember(_ token: RegistrationToken, isInstance instance: InstanceID)
    /// The platform `instance` registered with (`ios`, `android`, `web`; `nil`: none given).
    mutating func platform(of instance: InstanceID) throws -> String?
    /// Takes `targets`' identifiers out of every event appended so far and renames their instances to their
    /// pseudonyms (``LogRedaction``); what was rewritten for each.
    mutating func redact(_ targets: [ErasureTarget]) throws -> [Redaction]
    /// Forgets the contents of the sends older than `cutoff` after the last range swept, at most `limit` sends,
    /// for `reason` (``ContentRetention``); the range and what it did, or `nil` when no send is left to look at.
    mutating func forgetContents(before cutoff: LedgerTime, limit: Int, reason: String) throws
        -> (range: ClosedRange<UInt64>, count: ContentRetention.Count)?
}

/// Where a ``LogAppender`` stores what it appends: each event, then the head.
package protocol EventSink {
    /// Stores `event`, which follows the event whose chain hash is `previousHash`: encodes it, chains it
    /// (replacing `previousHash` with its hash), writes its record and extends the Merkle tree — or keeps it
    /// for a later stage that does all that in order (a bulk import's log writer, or ``TransactionSink`` at
    /// ``store(head:)``), leaving `previousHash` alone.
    mutating func store(_ event: LedgerEvent, chainingFrom previousHash: inout [UInt8]) throws
    /// Stores the head after the last event of the transaction (its hash as the sink chained it).
    mutating func store(head: LedgerHead) throws
}

/// Appends events: checks each operation against the state it meets, hands the event to the sink (which
/// encodes, chains and stores it, now or in a later stage), and folds it into the projections.
///
/// The live writer runs it over one write transaction (``MemoizedProjection`` and ``TransactionSink``):
/// the log, the tree and the projections change together or not at all. A bulk import runs it over the
/// projections in memory (``BulkImport``), whose sink keeps the decided events for its log writer, and
/// writes the projections once at the end. It holds no state beyond its projection and sink, so a
/// transaction that is retried (map growth) or aborted leaves nothing behind in it.
package struct LogAppender<Projection: AppenderProjection, Sink: EventSink> {
    let limits: LedgerLimits
    package private(set) var head: LedgerHead
    package private(set) var projection: Projection
    package var sink: Sink
    private var messageIDs: any RandomNumberGenerator
    /// The id of the message sent last, read from the projection at the first send of the transaction.
    private var lastMessageID: UInt64?
    /// Whether the last send appended went out on a broadcast channel (an `endLiveActivities` follows its send).
    private var lastSendBroadcasts = false

    package init(
        projection: Projection, sink: Sink, head: LedgerHead, limits: LedgerLimits,
        messageIDs: any RandomNumberGenerator
    ) {
        self.projection = projection
        self.sink = sink
        self.head = head
        self.limits = limits
        self.messageIDs = messageIDs
    }

    /// Applies one request: its receipt, or — decided before anything is written — why the request as a
    /// whole is refused (its time precedes the head).
    ///
    /// Refusals and per-operation rejections are values. Anything thrown (an LMDB failure, an encoding
    /// error, a broken invariant) means the transaction must be aborted, with every request in it.
    package mutating func apply(_ request: WriteRequest, now: LedgerTime) throws -> Result<WriteReceipt, StoreError> {
        let time: LedgerTime
        if let requested = request.time {
            guard requested >= head.time else {
                return .failure(
                    StoreError(
                        .invalidArgument,
                        "event time \(requested) precedes the ledger's last event time \(head.time); times never decrease"
                    ))
            }
            time = requested
        } else {
            time = max(now, head.time)
        }
        if request.forgetsContents {
            guard request.operations.count == 1, case .forgetContents(let cutoff, let limit) = request.operations[0]
            else {
                return .failure(StoreError(.invalidArgument, "a request that forgets contents does nothing else"))
            }
            let outcome = try applyRetention(before: cutoff, limit: limit, request: request, time: time)
            return .success(WriteReceipt(outcomes: [outcome], time: time))
        }
        if request.erases {
            guard request.operations.allSatisfy({ if case .erase = $0 { true } else { false } }) else {
                return .failure(StoreError(.invalidArgument, "a request that erases devices does nothing else"))
            }
            return .success(WriteReceipt(outcomes: try applyErasures(request, time: time), time: time))
        }
        var outcomes: [OperationOutcome] = []
        outcomes.reserveCapacity(request.operations.count)
        let resolved = request.resolvedInstances.count == request.operations.count ? request.resolvedInstances : []
        for (index, operation) in request.operations.enumerated() {
            if !resolved.isEmpty, let instance = resolved[index], let token = operation.token {
                projection.remember(token, isInstance: instance)
            }
            if case .endLiveActivities(let topic) = operation {
                // The send that ends the topic's Live Activity is the operation before it.
                guard case .sent(let sendSeq, let messageID)? = outcomes.last else {
                    let rejection = OperationRejection(
                        .notFound, "a Live Activity's end follows its send in one request")
                    outcomes.append(.rejected(rejection))
                    continue
                }
                outcomes.append(
                    try endLiveActivities(topic, sendSeq: sendSeq, messageID: messageID, request: request, time: time))
                continue
            }
            outcomes.append(try apply(operation, request: request, time: time))
        }
        return .success(WriteReceipt(outcomes: outcomes, time: time))
    }

    /// Stores the head; call once after the last request of the transaction.
    package mutating func finish() throws {
        try sink.store(head: head)
    }

    private mutating func apply(_ operation: LedgerOperation, request: WriteRequest, time: LedgerTime) throws
        -> OperationOutcome
    {
        switch operation {
        case .register(let token, let platform, let appID):
            guard !Erasure.isPseudonym(token) else {
                return .rejected(OperationRejection(.alreadyExists, "the token names an erased device"))
            }
            if let instance = try projection.instanceID(for: token), try projection.isRegistered(instance) {
                return .rejected(OperationRejection(.alreadyExists, "registration token is already registered"))
            }
            return .appended(
                seq: try append(.registered(token: token, platform: platform, appID: appID), request, time))

        case .unregister(let token, let reason):
            guard try registeredInstance(token) != nil else { return .rejected(Self.unknownToken) }
            return .appended(seq: try append(.unregistered(token: token, reason: reason), request, time))

        case .subscribe(let token, let topic, let via, let failIfPresent):
            guard let instance = try registeredInstance(token) else { return .rejected(Self.unknownToken) }
            let topicID = try projection.topicID(for: topic, create: false)
            let present = try topicID.map { try projection.subscribedSince($0, instance: instance) != nil } ?? false
            if present {
                guard !failIfPresent else {
                    return .rejected(
                        OperationRejection(.alreadyExists, "the instance is already subscribed to the topic"))
                }
                return .unchanged
            }
            let count = try projection.topicCount(of: instance)
            if count >= limits.maximumTopicsPerInstance {
                return .rejected(
                    OperationRejection(
                        .tooManyTopics, "the instance is subscribed to \(count) topics, the most allowed"))
            }
            return .appended(seq: try append(.subscribed(token: token, topic: topic, via: via), request, time))

        case .unsubscribe(let token, let topic, let via, let failIfAbsent):
            guard let instance = try registeredInstance(token) else { return .rejected(Self.unknownToken) }
            let topicID = try projection.topicID(for: topic, create: false)
            let present = try topicID.map { try projection.subscribedSince($0, instance: instance) != nil } ?? false
            if !present {
                guard !failIfAbsent else {
                    return .rejected(OperationRejection(.notFound, "the instance is not subscribed to the topic"))
                }
                return .unchanged
            }
            return .appended(seq: try append(.unsubscribed(token: token, topic: topic, via: via), request, time))

        case .send(let target, let precedence, let messageJSON, let topicActivity):
            if case .token(let token) = target, try registeredInstance(token) == nil {
                return .rejected(Self.unknownToken)
            }
            let messageID = try freshMessageID(at: time)
            // Only a topic's send has a topic's Live Activity.
            var delivery: TopicActivityDelivery?
            var channel: String?
            if case .topic(let topic) = target, let topicActivity {
                delivery = topicActivity.delivery
                if topicActivity.delivery == .followers, topicActivity.broadcastIfChannel {
                    channel = try projection.liveActivityChannel(of: topic)?.channelID
                }
            }
            let sent = SentMessage(
                messageID: messageID, target: target, precedence: precedence, messageJSON: messageJSON,
                broadcastChannelID: channel, topicActivity: delivery)
            lastSendBroadcasts = channel != nil
            return .sent(seq: try append(.sent(sent), request, time), messageID: messageID)

        case .recordAudience(let audience):
            guard let state = try projection.messageState(audience.messageID), state.sendSeq == audience.sendSeq else {
                return .rejected(OperationRejection(.notFound, "no message \(audience.messageID) sent at that seq"))
            }
            guard state.audienceSeq == 0 else {
                return .rejected(OperationRejection(.alreadyExists, "the audience of the message is already recorded"))
            }
            return .appended(seq: try append(.audience(audience), request, time))

        case .acknowledge(let token, let through):
            guard let instance = try registeredInstance(token) else { return .rejected(Self.unknownToken) }
            guard through <= head.seq else {
                return .rejected(OperationRejection(.notFound, "no event at seq \(through) yet"))
            }
            if through <= (try projection.acknowledgedThrough(instance)) { return .unchanged }
            return .appended(seq: try append(.acknowledged(token: token, through: through), request, time))

        case .setAPNsToken(let token, let apnsToken):
            guard let instance = try registeredInstance(token) else { return .rejected(Self.unknownToken) }
            guard try projection.platform(of: instance) == "ios" else {
                return .rejected(
                    OperationRejection(.wrongPlatform, "an APNs token belongs to a registration whose platform is ios"))
            }
            if try projection.apnsToken(of: instance) == apnsToken { return .unchanged }
            return .appended(seq: try append(.apnsTokenSet(token: token, apnsToken: apnsToken), request, time))

        case .clearAPNsToken(let token, let reason):
            guard let instance = try registeredInstance(token) else { return .rejected(Self.unknownToken) }
            if try projection.apnsToken(of: instance) == nil { return .unchanged }
            return .appended(seq: try append(.apnsTokenCleared(token: token, reason: reason), request, time))

        case .recordPushProgress(let progress):
            // Never a token the ledger no longer knows (a device erased while its pushes were under way): that
            // would write it back into the log. The pusher names such a device by its pseudonym next time.
            for token in (progress.throughToken.map { [$0] } ?? []) + progress.failures.map(\.token)
            where try projection.instanceID(for: token) == nil {
                return .rejected(
                    OperationRejection(.notFound, "the push progress names a token the ledger does not know"))
            }
            return .appended(seq: try append(.pushProgress(progress), request, time))

        case .recordLiveActivityChannelCreated(let change):
            if try projection.liveActivityChannel(of: change.topic) != nil {
                return .rejected(OperationRejection(.alreadyExists, "the topic has a broadcast channel already"))
            }
            return .appended(seq: try append(.liveActivityChannelCreated(change), request, time))

        case .recordLiveActivityChannelDeleted(let change):
            guard try projection.liveActivityChannel(of: change.topic)?.channelID == change.channelID else {
                return .rejected(OperationRejection(.notFound, "the topic has no such broadcast channel"))
            }
            return .appended(seq: try append(.liveActivityChannelDeleted(change), request, time))

        case .followLiveActivity(let token, let topic, let pushToken):
            guard let instance = try registeredInstance(token) else { return .rejected(Self.unknownToken) }
            guard try projection.platform(of: instance) == "ios" else { return .rejected(Self.notIOS) }
            let topicID = try projection.topicID(for: topic, create: false)
            let held = try topicID.flatMap { try projection.liveActivityToken(of: instance, scope: .topic($0)) }
            if held == pushToken { return .unchanged }
            // A new follow counts against the device's topics' limit (a replaced token does not).
            if held == nil {
                let follows = try projection.liveActivityScopes(of: instance).count {
                    if case .topic = $0 { true } else { false }
                }
                if follows >= limits.maximumTopicsPerInstance {
                    return .rejected(
                        OperationRejection(
                            .tooManyTopics, "the instance follows \(follows) topics' Live Activities, the most allowed"))
                }
            }
            return .appended(
                seq: try append(.liveActivityFollowed(token: token, topic: topic, pushToken: pushToken), request, time))

        case .unfollowLiveActivity(let token, let topic, let reason, let ifPushToken):
            guard let instance = try registeredInstance(token) else { return .rejected(Self.unknownToken) }
            guard let topicID = try projection.topicID(for: topic, create: false),
                let held = try projection.liveActivityToken(of: instance, scope: .topic(topicID))
            else { return .unchanged }
            // Only the follow with that token (APNs refused it): a device that followed again since keeps its follow.
            if let ifPushToken, held.bytes != ifPushToken.bytes { return .unchanged }
            return .appended(
                seq: try append(.liveActivityUnfollowed(token: token, topic: topic, reason: reason), request, time))

        case .setPushToStartToken(let token, let attributesType, let pushToken):
            guard let instance = try registeredInstance(token) else { return .rejected(Self.unknownToken) }
            guard try projection.platform(of: instance) == "ios" else { return .rejected(Self.notIOS) }
            let scope = LiveActivityScope.pushToStart(attributesType: attributesType)
            let held = try projection.liveActivityToken(of: instance, scope: scope)
            if held == pushToken { return .unchanged }
            if held == nil {
                let types = try projection.liveActivityScopes(of: instance).count {
                    if case .pushToStart = $0 { true } else { false }
                }
                if types >= limits.maximumPushToStartTypes {
                    return .rejected(
                        OperationRejection(
                            .tooManyTopics,
                            "the instance holds push-to-start tokens for \(types) attributes types, the most allowed"))
                }
            }
            return .appended(
                seq: try append(
                    .pushToStartTokenSet(token: token, attributesType: attributesType, pushToken: pushToken), request,
                    time))

        case .endLiveActivities:
            // ``apply(_:now:)`` pairs it with the send before it (``endLiveActivities(_:sendSeq:messageID:request:time:)``).
            throw StoreError(.invalidArgument, "a Live Activity's end is applied after its send")

        case .erase:
            // ``apply(_:now:)`` hands requests that erase to ``applyErasures(_:time:)``.
            throw StoreError(.invalidArgument, "an erasure is applied with the request that holds it")
        case .forgetContents:
            // ``apply(_:now:)`` hands requests that forget contents to ``applyRetention(before:limit:request:time:)``.
            throw StoreError(.invalidArgument, "a retention sweep is applied with the request that holds it")
        }
    }

    /// Retires the followers' activity tokens of `topic` after the send at `sendSeq` that ended its Live Activity;
    /// `.unchanged` when nobody follows it, or when the send went out as a broadcast on the topic's channel.
    private mutating func endLiveActivities(
        _ topic: TopicName, sendSeq: UInt64, messageID: UInt64, request: WriteRequest, time: LedgerTime
    ) throws -> OperationOutcome {
        // A broadcast `end` reaches the channel's activities, not the followers' own: their tokens stay theirs.
        guard !lastSendBroadcasts else { return .unchanged }
        guard let topicID = try projection.topicID(for: topic, create: false),
            try !projection.liveActivityFollowers(of: topicID).isEmpty
        else { return .unchanged }
        return .appended(
            seq: try append(.liveActivitiesEnded(topic: topic, sendSeq: sendSeq, messageID: messageID), request, time))
    }

    /// A request of erasures: every known token's device is redacted in one pass over the log, then one
    /// `erased` event is appended for each. A token the ledger does not know (or named twice) is `.notFound`.
    private mutating func applyErasures(_ request: WriteRequest, time: LedgerTime) throws -> [OperationOutcome] {
        var outcomes = [OperationOutcome](repeating: .unchanged, count: request.operations.count)
        var targets: [ErasureTarget] = []
        var positions: [Int] = []
        var erased = Set<InstanceID>()
        for (index, operation) in request.operations.enumerated() {
            guard case .erase(let token, let reason, let pseudonym) = operation else { continue }
            guard !Erasure.isPseudonym(token), let instance = try projection.instanceID(for: token),
                erased.insert(instance).inserted
            else {
                outcomes[index] = .rejected(
                    OperationRejection(.notFound, "registration token is not known to the ledger"))
                continue
            }
            targets.append(
                ErasureTarget(
                    instance: instance, token: token, pseudonym: pseudonym ?? Erasure.newPseudonym(), reason: reason))
            positions.append(index)
        }
        guard !targets.isEmpty else { return outcomes }
        let redactions = try projection.redact(targets)
        for (target, (position, redaction)) in zip(targets, zip(positions, redactions)) {
            let erasure = Erasure(
                pseudonym: target.pseudonym, registeredSeq: redaction.registeredSeq, reason: target.reason,
                redactedEvents: redaction.events)
            outcomes[position] = .appended(seq: try append(.erased(erasure), request, time))
        }
        return outcomes
    }

    /// A retention sweep: the contents of old sends forgotten (``ContentRetention``), then one `retention` event
    /// naming the range; `.unchanged` when the range held no send (it is still taken as swept).
    private mutating func applyRetention(before cutoff: LedgerTime, limit: Int, request: WriteRequest, time: LedgerTime)
        throws -> OperationOutcome
    {
        guard
            let (range, count) = try projection.forgetContents(
                before: cutoff, limit: limit, reason: RetentionSweep.reason(at: time)),
            count.sends > 0
        else { return .unchanged }
        let sweep = RetentionSweep(
            firstSeq: range.lowerBound, throughSeq: range.upperBound, cutoff: cutoff,
            forgottenContents: count.forgotten, unsealedContents: count.unsealed)
        return .appended(seq: try append(.retention(sweep), request, time))
    }

    private static var unknownToken: OperationRejection {
        OperationRejection.unregistered
    }

    private static var notIOS: OperationRejection {
        OperationRejection(.wrongPlatform, "an ActivityKit token belongs to a registration whose platform is ios")
    }

    private mutating func registeredInstance(_ token: RegistrationToken) throws -> InstanceID? {
        guard let instance = try projection.instanceID(for: token), try projection.isRegistered(instance) else {
            return nil
        }
        return instance
    }

    /// An id in 1…2^63-1 not used before in this project, after the last one sent (``MessageIDs``); a
    /// random one only when the ids after the last one have run out.
    private mutating func freshMessageID(at time: LedgerTime) throws -> UInt64 {
        let last = try lastMessageID ?? projection.lastSentMessageID()
        var candidate = MessageIDs.candidate(at: time, after: last)
        while true {
            let id = candidate ?? UInt64.random(in: 1...MessageIDs.largest, using: &messageIDs)
            if try projection.messageState(id) == nil {
                lastMessageID = id
                return id
            }
            // Taken: only by an id of a ledger written before ids were ordered, which were random.
            candidate = MessageIDs.candidate(at: time, after: id)
        }
    }

    /// Stores (through the sink) and folds one event.
    private mutating func append(_ body: LedgerEvent.Body, _ request: WriteRequest, _ time: LedgerTime) throws
        -> UInt64
    {
        let event = LedgerEvent(
            seq: head.seq + 1, time: time, actor: request.actor, requestID: request.requestID, body: body,
            seals: limits.sealsEvents
                ? EventSealer.seals(for: body, seq: head.seq + 1, keys: limits.sealKeys) : nil)
        try sink.store(event, chainingFrom: &head.hash)
        head.seq = event.seq
        head.time = time
        try EventFold.apply(event, to: &projection)
        return event.seq
    }
}

extension LogAppender where Projection == MemoizedProjection, Sink == TransactionSink {
    /// The live writer's appender: everything in `txn`, from the head stored there, with the writer's
    /// `facts` begun for `txn` (``WriterInstanceCache``).
    init(
        txn: LMDBTransaction, schema: LedgerSchema, limits: LedgerLimits, facts: WriterInstanceCache,
        chainWorker: SerialWorker<BlockingJob, Void>, messageIDs: any RandomNumberGenerator
    ) throws {
        let head =
            try txn.withValue(in: schema.meta, forKey: MetaKey.head) { try $0.map(LedgerHead.init) } ?? .empty
        self.init(
            projection: MemoizedProjection(txn: txn, schema: schema, facts: facts),
            sink: TransactionSink(txn: txn, schema: schema, chainWorker: chainWorker), head: head, limits: limits,
            messageIDs: messageIDs)
    }
}

/// Stores events in the write transaction that also holds the projections: the log records, and the Merkle
/// tree's nodes as they complete — all put when the appender finishes, before the head.
///
/// A transaction of many events (a batchAdd, an import's requests) is encoded, chained and hashed by an
/// ``EventChainer`` on another thread, a chunk at a time, while the writer decides and folds the next events;
/// a small one is chained here at the end (waking another thread would cost it more than the hashing).
/// Either way the chain is computed from the head's hash in seq order, and nothing is stored before
/// ``store(head:)``, so the chain hash the appender passes to ``store(_:chainingFrom:)`` is left as it was
/// at the transaction's start and the head's hash is set here. No one reads this transaction's log records
/// before it finishes.
struct TransactionSink: EventSink {
    /// Events handed to a chainer this many at a time; below it a transaction is chained on the writer.
    static let chunk = 256

    let txn: LMDBTransaction
    let schema: LedgerSchema
    private var pending: [LedgerEvent] = []
    private var chainer: EventChainer?
    /// The records stored, in seq order, when they are to be replicated (``Ledger/Options/replication``);
    /// `nil` when they are not kept.
    var replicatedRecords: [[UInt8]]?
    /// The thread a chainer chains on: the writer's own, for all its transactions.
    private let chainWorker: SerialWorker<BlockingJob, Void>

    init(txn: LMDBTransaction, schema: LedgerSchema, chainWorker: SerialWorker<BlockingJob, Void>) {
        self.txn = txn
        self.schema = schema
        self.chainWorker = chainWorker
    }

    mutating func store(_ event: LedgerEvent, chainingFrom previousHash: inout [UInt8]) throws {
        pending.append(event)
        guard pending.count >= Self.chunk else { return }
        if chainer == nil {
            chainer = EventChainer(chainingFrom: previousHash, firstSeq: pending[0].seq, worker: chainWorker)
        }
        chainer?.submit(pending)
        pending = []
        pending.reserveCapacity(Self.chunk)
    }

    /// Hands the events not yet submitted to the chainer, when there is one, so that it chains them while the
    /// writer does other work before ``store(head:)`` waits for it (the moves of ``RecentMemberships``).
    mutating func submitPending() {
        guard let chainer, !pending.isEmpty else { return }
        chainer.submit(pending)
        pending = []
    }

    /// `head.hash` is the hash the transaction began from (the appender's, which this sink left alone).
    mutating func store(head: LedgerHead) throws {
        var head = head
        if let chainer {
            chainer.submit(pending)
            let output = chainer.finish()
            try putRecords(output)
            head.hash = output.hash
        } else if !pending.isEmpty {
            head.hash = try putRecords(of: pending, chainingFrom: head.hash)
        }
        pending = []
        try txn.put(schema.meta, key: MetaKey.head, value: head.encoded)
    }

    /// Puts the chainer's records, then the tree's subtrees they complete: the one the transaction began
    /// inside of from the log (its earlier leaves are there), the others as the chainer hashed them.
    private mutating func putRecords(_ output: EventChainer.Output) throws {
        guard !output.ends.isEmpty else { return }
        let first = output.firstSeq
        var start = 0
        for (offset, end) in output.ends.enumerated() {
            try txn.put(schema.log, key: first + UInt64(offset), value: output.records[start..<end], flags: .append)
            replicatedRecords?.append(Array(output.records[start..<end]))
            start = end
        }
        if let end = output.beganInside, end < first + UInt64(output.ends.count) {
            try MerkleStore.didAppend(seq: end, txn: txn, schema: schema)
        }
        for subtree in output.subtrees {
            try MerkleStore.store(
                lowestSubtree: subtree.hash, completedAt: subtree.completedAt, txn: txn, schema: schema)
        }
    }

    /// Encodes, chains and puts `events` here, with the subtrees they complete; returns the last chain hash.
    private mutating func putRecords(of events: [LedgerEvent], chainingFrom hash: [UInt8]) throws -> [UInt8] {
        var hash = hash
        var record: [UInt8] = []
        for event in events {
            record.removeAll(keepingCapacity: true)
            HashChain.appendRecord(of: event, chainingFrom: &hash, to: &record)
            try txn.put(schema.log, key: event.seq, value: record, flags: .append)
            replicatedRecords?.append(record)
            try MerkleStore.didAppend(seq: event.seq, txn: txn, schema: schema)
        }
        return hash
    }
}

/// Limits the store enforces on every append.
public struct LedgerLimits: Sendable {
    /// Topics one instance may hold (FCM: 2000).
    public var maximumTopicsPerInstance = 2000
    /// Push-to-start tokens one instance holds, one per ActivityAttributes type (an app has a few types).
    public var maximumPushToStartTypes = 64
    /// New memberships the instance side gathers in `recentMemberships` before the writer moves them to
    /// `instanceTopics` (``RecentMemberships``); 0 moves them at every commit. The more wait, the fewer times
    /// each instance's page is rewritten per membership, and the more a reader of one instance's topics scans
    /// (its partition's share of them).
    public var recentMembershipsBeforeMove = 262_144
    /// Whether appended events are sealed (encoding version 3, docs/event-format.md "Sealed fields"). Only tests
    /// turn it off, to write a log as the builds before sealing did (version 1), and check what stays of it.
    package var sealsEvents = true
    /// Where seal keys come from: the kernel's random numbers; a seeded sequence in tests that compare ledgers.
    package var sealKeys = SealKeySource.system

    public init() {}
}
