import LMDBKit
import LedgerCore

/// Appends events inside one write transaction: checks each operation against the state it meets,
/// encodes and chains the event, extends the Merkle tree, and folds the event into the projections in the
/// same transaction.
///
/// Holds no state beyond the transaction, so a transaction that is retried (map growth) or aborted
/// leaves nothing behind.
struct LogAppender {
    let txn: LMDBTransaction
    let schema: LedgerSchema
    let limits: LedgerLimits
    private(set) var head: LedgerHead
    private var projection: MemoizedProjection
    private var messageIDs: any RandomNumberGenerator

    init(txn: LMDBTransaction, schema: LedgerSchema, limits: LedgerLimits, messageIDs: any RandomNumberGenerator)
        throws
    {
        self.txn = txn
        self.schema = schema
        self.limits = limits
        self.head =
            try txn.withValue(in: schema.meta, forKey: MetaKey.head) { try $0.map(LedgerHead.init) }
            ?? .empty
        self.projection = MemoizedProjection(txn: txn, schema: schema)
        self.messageIDs = messageIDs
    }

    /// Applies one request: its receipt, or — decided before anything is written — why the request as a
    /// whole is refused (its time precedes the head).
    ///
    /// Refusals and per-operation rejections are values. Anything thrown (an LMDB failure, an encoding
    /// error, a broken invariant) means the transaction must be aborted, with every request in it.
    mutating func apply(_ request: WriteRequest, now: LedgerTime) throws -> Result<WriteReceipt, StoreError> {
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
        var outcomes: [OperationOutcome] = []
        outcomes.reserveCapacity(request.operations.count)
        for operation in request.operations {
            outcomes.append(try apply(operation, request: request, time: time))
        }
        return .success(WriteReceipt(outcomes: outcomes, time: time))
    }

    /// Stores the head; call once after the last request of the transaction.
    func finish() throws {
        try txn.put(schema.meta, key: MetaKey.head, value: head.encoded)
    }

    private mutating func apply(_ operation: LedgerOperation, request: WriteRequest, time: LedgerTime) throws
        -> OperationOutcome
    {
        switch operation {
        case .register(let token, let platform, let appID):
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

        case .send(let target, let precedence, let messageJSON):
            if case .token(let token) = target, try registeredInstance(token) == nil {
                return .rejected(Self.unknownToken)
            }
            let messageID = try freshMessageID()
            let sent = SentMessage(
                messageID: messageID, target: target, precedence: precedence, messageJSON: messageJSON)
            return .sent(seq: try append(.sent(sent), request, time), messageID: messageID)

        case .recordAudience(let audience):
            let state = try txn.withValue(in: schema.messages, forKey: audience.messageID) {
                $0.map(MessageState.init)
            }
            guard let state, state.sendSeq == audience.sendSeq else {
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
        }
    }

    private static let unknownToken = OperationRejection(.notFound, "registration token is not registered")

    private mutating func registeredInstance(_ token: RegistrationToken) throws -> InstanceID? {
        guard let instance = try projection.instanceID(for: token), try projection.isRegistered(instance) else {
            return nil
        }
        return instance
    }

    /// A random id in 1…2^63-1 not used before in this project.
    private mutating func freshMessageID() throws -> UInt64 {
        while true {
            let candidate = UInt64.random(in: 1...UInt64(Int64.max), using: &messageIDs)
            if try !txn.contains(schema.messages, key: candidate) { return candidate }
        }
    }

    /// Encodes, chains, stores and folds one event.
    private mutating func append(_ body: LedgerEvent.Body, _ request: WriteRequest, _ time: LedgerTime) throws
        -> UInt64
    {
        let event = LedgerEvent(
            seq: head.seq + 1, time: time, actor: request.actor, requestID: request.requestID, body: body)
        let (record, hash) = HashChain.record(of: event, previous: head.hash)
        try txn.put(schema.log, key: event.seq, value: record, flags: .append)
        try MerkleStore.didAppend(seq: event.seq, txn: txn, schema: schema)
        try EventFold.apply(event, to: &projection)
        head = LedgerHead(seq: event.seq, time: time, hash: hash)
        return event.seq
    }
}

/// Limits the store enforces on every append.
public struct LedgerLimits: Sendable {
    /// Topics one instance may hold (FCM: 2000).
    public var maximumTopicsPerInstance = 2000

    public init() {}
}
