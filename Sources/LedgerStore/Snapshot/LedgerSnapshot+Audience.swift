import LMDBKit
import LedgerCore

extension LedgerSnapshot {
    /// The instances a send to `target` reaches in the state at `seq` (now, when `nil`): members of the
    /// topic; instances satisfying the condition under `precedence`; or the token's instance if registered.
    ///
    /// Computed by set algebra over the temporal index — reading only the topics named and the universe,
    /// never the log.
    ///
    /// - Throws: `LedgerCoreError.invalidArgument` for a condition that does not parse.
    public func audience(of target: MessageTarget, precedence: ConditionPrecedence, at seq: UInt64? = nil) throws
        -> InstanceSet
    {
        let capacity = try instanceIDBound()
        switch target {
        case .topic(let name):
            guard let topic = try topicID(of: name) else { return InstanceSet(capacity: capacity) }
            return try memberSet(of: topic, at: seq, capacity: capacity)
        case .token(let token):
            var set = InstanceSet(capacity: capacity)
            if let instance = try instanceID(of: token), try isRegistered(instance, at: seq) { set.insert(instance) }
            return set
        case .condition(let text):
            return try audience(of: try Condition(parsing: text, precedence: precedence), at: seq)
        }
    }

    /// The instances satisfying `condition` in the state at `seq` (now, when `nil`).
    public func audience(of condition: Condition, at seq: UInt64? = nil) throws -> InstanceSet {
        let universe = try universe(at: seq)
        return try condition.audience(universe: universe) { name in
            try memberSet(named: name, at: seq, capacity: universe.capacity)
        }
    }

    /// The condition's tree with the audience size of every sub-expression in the state at `seq`.
    public func explain(_ condition: Condition, at seq: UInt64? = nil) throws -> ExplainedCondition {
        let universe = try universe(at: seq)
        var cache: [TopicName: InstanceSet] = [:]
        return try condition.explained(universe: universe) { name in
            if let cached = cache[name] { return cached }
            let set = try memberSet(named: name, at: seq, capacity: universe.capacity)
            cache[name] = set
            return set
        }
    }

    /// The registration tokens of `recipients` in byte order (the order of a version-1 recipient digest).
    public func recipientTokens(_ recipients: InstanceSet) throws -> [RegistrationToken] {
        try recipientList(recipients).map(\.token)
    }

    /// The members of `recipients` with their tokens, in token byte order (how replays list them).
    ///
    /// Small sets look each token up and sort; large ones walk the `tokens` database, which LMDB already
    /// keeps in byte order, and keep the members.
    public func recipientList(_ recipients: InstanceSet) throws -> [(token: RegistrationToken, device: InstanceID)] {
        let count = recipients.count
        var list: [(token: RegistrationToken, device: InstanceID)] = []
        list.reserveCapacity(count)
        if count * 16 < recipients.capacity {
            try recipients.forEach { instance in
                guard let token = try token(of: instance) else {
                    throw StoreError(.corrupt, "instance \(instance) has no token")
                }
                list.append((token, instance))
            }
            list.sort { $0.token < $1.token }
            return list
        }
        try forEachToken(of: recipients) { token, instance in
            list.append((RegistrationToken(trusted: String(decoding: token, as: UTF8.self)), instance))
        }
        return list
    }

    /// Calls `body` with the token of each member of `recipients`, in byte order, straight from the `tokens`
    /// database's pages.
    ///
    /// Tokens longer than LMDB's key limit are stored under their hash (``NameKey``), and those keys sort
    /// before all others: they are collected and resolved first, then merged into the walk at their place.
    private func forEachToken(
        of recipients: InstanceSet, _ body: (UnsafeRawBufferPointer, InstanceID) throws -> Void
    ) throws {
        var long: [(token: [UInt8], instance: InstanceID)] = []
        var nextLong = 0
        var sorted = false
        func emitLong(before key: UnsafeRawBufferPointer?) throws {
            if !sorted {
                long.sort { $0.token.lexicographicallyPrecedes($1.token) }
                sorted = true
            }
            while nextLong < long.count, key.map({ long[nextLong].token.lexicographicallyPrecedes($0) }) ?? true {
                try long[nextLong].token.withUnsafeBytes { try body($0, long[nextLong].instance) }
                nextLong += 1
            }
        }
        try txn.withCursor(schema.tokens) { cursor in
            try cursor.forEach { entry in
                let instance = entry.value.loadBigEndianUInt32()
                guard recipients.contains(instance) else { return true }
                if NameKey.isHashed(entry.key) {
                    guard let token = try token(of: instance) else {
                        throw StoreError(.corrupt, "instance \(instance) has no token")
                    }
                    long.append((Array(token.rawValue.utf8), instance))
                    return true
                }
                try emitLong(before: entry.key)
                try body(entry.key, instance)
                return true
            }
        }
        try emitLong(before: nil)
    }

    /// The count and recipient digest of `recipients` in `version` — what an `audience` event records.
    ///
    /// Version 2 reads nothing: the device numbers are the set's members. Version 1, for large sets, hashes
    /// members' keys straight from the `tokens` database's pages, which LMDB keeps in byte order.
    public func recipientDigest(_ recipients: InstanceSet, version: RecipientDigest.Version = .current) throws
        -> (count: Int, digest: [UInt8])
    {
        let count = recipients.count
        var builder = RecipientDigest.Builder()
        switch version {
        case .devices:
            recipients.forEach { builder.add(device: $0) }
        case .tokens where count * 16 < recipients.capacity:
            let tokens = try recipientTokens(recipients)
            return (tokens.count, RecipientDigest.digest(sortedTokens: tokens))
        case .tokens:
            try forEachToken(of: recipients) { token, _ in builder.add(rawToken: token) }
        }
        guard builder.count == count else {
            throw StoreError(.corrupt, "\(count) recipients but \(builder.count) of them have a token")
        }
        return (count, builder.finish())
    }

    private func memberSet(named name: TopicName, at seq: UInt64?, capacity: Int) throws -> InstanceSet {
        guard let topic = try topicID(of: name) else { return InstanceSet(capacity: capacity) }
        return try memberSet(of: topic, at: seq, capacity: capacity)
    }
}

extension LedgerSnapshot {
    /// The `sent` event at `seq`.
    package func sentEvent(at seq: UInt64) throws -> (LedgerEvent, SentMessage) {
        guard let event = try event(at: seq), case .sent(let sent) = event.body else {
            throw StoreError(.corrupt, "the messages index points at seq \(seq), which is not a `sent` event")
        }
        return (event, sent)
    }

    /// The recipients of `sent`, sent at `seq`, with their device numbers, in token byte order: the audience in
    /// the state at `seq`, computed from the temporal index.
    public func recipients(of sent: SentMessage, at seq: UInt64) throws
        -> [(token: RegistrationToken, device: InstanceID)]
    {
        try recipientList(audience(of: sent.target, precedence: sent.precedence, at: seq))
    }

    /// The `audience` records of `sends`, each computed for the state at its send's seq; a send whose
    /// audience is exactly the last one `memo` saw for its target reuses that count and digest — for a
    /// topic none of whose memberships changed since (as `changes` dates them), without reading it.
    func audienceRecords(_ sends: [PendingAudience], memo: RecipientDigestMemo, changes: TopicChangeTracker) throws
        -> [AudienceRecord]
    {
        try sends.map { pending in
            let (_, sent) = try sentEvent(at: pending.sendSeq)
            let recipients: RecipientDigestMemo.Digest
            if case .topic(let topic) = sent.target,
                let unchanged = memo.unchangedDigest(of: topic, at: pending.sendSeq, changes: changes)
            {
                recipients = unchanged
            } else {
                let members = try audience(of: sent.target, precedence: sent.precedence, at: pending.sendSeq)
                recipients = try memo.digest(
                    of: members, target: sent.target, precedence: sent.precedence, at: pending.sendSeq
                ) {
                    let (count, digest) = try recipientDigest($0)
                    return RecipientDigestMemo.Digest(count: count, digest: digest)
                }
            }
            return AudienceRecord(
                messageID: pending.messageID, sendSeq: pending.sendSeq, recipientCount: UInt64(recipients.count),
                recipientDigest: recipients.digest)
        }
    }

    /// Sends with no `audience` event yet, in seq order.
    package func sendsWithoutAudience() throws -> [PendingAudience] {
        var pending: [PendingAudience] = []
        try txn.withCursor(schema.messages) { cursor in
            try cursor.forEach { entry in
                if MessageState(entry.value).audienceSeq == 0 {
                    pending.append(
                        PendingAudience(
                            messageID: entry.key.loadBigEndianUInt64(), sendSeq: entry.value.loadBigEndianUInt64()))
                }
                return true
            }
        }
        return pending.sorted { $0.sendSeq < $1.sendSeq }
    }
}
