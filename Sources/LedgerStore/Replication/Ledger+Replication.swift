import LMDBKit
import LedgerCore

extension Ledger {
    /// What applying a replicated block did.
    public enum ReplicaApplication: Sendable, Equatable {
        /// The block's records were appended; the head is now `head`.
        case applied(head: LedgerHead)
        /// Every record of the block was already here, with the same chain hash: nothing changed.
        case alreadyApplied
    }

    /// Appends a block its project's leader replicated: each record checked against the chain it extends —
    /// its hash recomputed from the previous hash and its event, its seq the next one, its time not before
    /// the head's — stored as it came, and folded into the projections, in one write transaction with the
    /// new head. A follower's only write.
    ///
    /// Blocks are applied in order: a block that begins after the head leaves a gap, and one that does not
    /// chain from the head would fork the log. Both are refused with nothing written; one that lies wholly at
    /// or before the head is accepted as `.alreadyApplied` when its last record is the one stored at its seq.
    ///
    /// Runs on the caller's thread (a write transaction; LMDB serializes it with the writer's).
    ///
    /// - Throws: `StoreError` `.corrupt` (the block does not chain, or is not the one already applied at its
    ///   seqs), `.notFound` (it begins after the head + 1: a gap), `.unavailable` (storage).
    public func applyReplicated(_ block: ReplicatedBlock) throws -> ReplicaApplication {
        guard options.mode == .readWrite else {
            throw StoreError(.invalidArgument, "the ledger of \(project) is open read-only")
        }
        guard !block.records.isEmpty else { return .alreadyApplied }
        let application: ReplicaApplication
        let sends: [UInt64]
        let erasures: [UInt64]
        let sweeps: Int
        do {
            (application, sends, erasures, sweeps) = try environment.write { txn in
                let snapshot = try LedgerSnapshot(txn: txn, schema: schema)
                let head = try snapshot.head()
                guard block.firstSeq <= head.seq + 1 else {
                    throw StoreError(
                        .notFound, "replicated block begins at seq \(block.firstSeq), after the head \(head.seq) + 1")
                }
                // Records already here (a block applied before, or one overlapping the head) must be the ones
                // stored, byte for byte; the rest follow the head.
                let skip = Int(min(head.seq + 1 - block.firstSeq, UInt64(block.records.count)))
                for (offset, record) in block.records.prefix(skip).enumerated() {
                    let seq = block.firstSeq + UInt64(offset)
                    let same = try txn.withValue(in: schema.log, forKey: seq) { $0.map { $0.elementsEqual(record) } }
                    guard same == true else {
                        throw StoreError(.corrupt, "replicated record at seq \(seq) differs from the one stored here")
                    }
                }
                if skip == block.records.count { return (ReplicaApplication.alreadyApplied, [], [], 0) }
                let previous =
                    skip == 0 ? block.previousHash : Array(block.records[skip - 1].prefix(HashChain.hashSize))
                guard previous == head.hash else {
                    throw StoreError(
                        .corrupt, "replicated block at seq \(head.seq + 1) does not chain from the head here (a fork)")
                }
                return try Self.appendReplicated(
                    block.records[skip...], after: head, txn: txn, schema: schema, options: options)
            }
        } catch let error as StoreError {
            throw error
        } catch {
            throw Ledger.storageError(error, directory: directory)
        }
        if !erasures.isEmpty {
            compaction?.afterReplicatedErasures(at: erasures)
        } else if sweeps > 0 {
            compaction?.afterReplicatedRetention()
        } else {
            compaction?.compactIfOwed()
        }
        if case .applied(let head) = application {
            notifyReplicated(through: head.seq, sends: sends)
        }
        return application
    }

    /// Checks, stores and folds `records`, which follow `head`; returns the new head and the seqs of the sends
    /// and of the erasures, and how many retention sweeps it applied.
    ///
    /// An `erased` event is what the leader appended after rewriting its own copy's events that named the
    /// device (``LogRedaction``): this copy rewrites its own the same way — the device found by the token of its
    /// `registered` event, at the erasure's `registeredSeq`, and given the erasure's pseudonym — before the
    /// event is folded. A `retention` event likewise: this copy forgets the contents of the sends in its range,
    /// for the same reason (``ContentRetention``), so that its records end as the leader's. The file is compacted
    /// once the transaction commits.
    private static func appendReplicated(
        _ records: ArraySlice<[UInt8]>, after head: LedgerHead, txn: LMDBTransaction, schema: LedgerSchema,
        options: Options
    ) throws -> (ReplicaApplication, [UInt64], [UInt64], Int) {
        var projection = LMDBProjection(txn: txn, schema: schema)
        var head = head
        var sends: [UInt64] = []
        var erasures: [UInt64] = []
        var sweeps = 0
        for record in records {
            let event = try record.withUnsafeBytes { bytes -> LedgerEvent in
                let (hash, encoded) = try HashChain.split(record: bytes)
                let event = try EventCodec.decode(encoded)
                // A leader writes only sealed (or, before the upgrade, version-1) records: a rewritten one (version
                // 2) never travels, and its hash could not be checked.
                guard
                    let computed = try HashChain.recomputedHash(
                        previous: head.hash, encodedEvent: encoded, decoded: event),
                    computed.elementsEqual(hash)
                else {
                    throw StoreError(.corrupt, "replicated record at seq \(head.seq + 1) does not chain (a fork)")
                }
                return event
            }
            guard event.seq == head.seq + 1 else {
                throw StoreError(.corrupt, "replicated record holds seq \(event.seq) where \(head.seq + 1) was due")
            }
            guard event.time >= head.time else {
                throw StoreError(.corrupt, "replicated event \(event.seq) goes back in time")
            }
            if case .erased(let erasure) = event.body {
                try redactReplicated(erasure, txn: txn, schema: schema)
                erasures.append(event.seq)
                try ErasureJournal.markOwed(from: event.seq, txn: txn, schema: schema)
            }
            if case .retention(let sweep) = event.body {
                guard sweep.firstSeq <= sweep.throughSeq, sweep.throughSeq < event.seq else {
                    throw StoreError(.corrupt, "replicated retention event \(event.seq) names seqs it cannot")
                }
                _ = try ContentRetention.forget(
                    sweep.firstSeq...sweep.throughSeq, reason: RetentionSweep.reason(at: event.time), txn: txn,
                    schema: schema)
                sweeps += 1
            }
            try txn.put(schema.log, key: event.seq, value: record, flags: .append)
            try MerkleStore.didAppend(seq: event.seq, txn: txn, schema: schema)
            try EventFold.apply(event, to: &projection)
            if case .sent = event.body { sends.append(event.seq) }
            head = LedgerHead(seq: event.seq, time: event.time, hash: Array(record.prefix(HashChain.hashSize)))
        }
        _ = try RecentMemberships.moveIfFull(
            txn: txn, schema: schema, limit: options.limits.recentMembershipsBeforeMove,
            cursor: RecentMemberships.MoveCursor())
        try txn.put(schema.meta, key: MetaKey.head, value: head.encoded)
        return (.applied(head: head), sends, erasures, sweeps)
    }

    /// Rewrites this copy's events naming the device `erasure` erased (nothing when this copy has done so
    /// already, or never held it).
    private static func redactReplicated(_ erasure: Erasure, txn: LMDBTransaction, schema: LedgerSchema) throws {
        let snapshot = LedgerSnapshot(txn: txn, schema: schema)
        guard let registered = try snapshot.event(at: erasure.registeredSeq),
            case .registered(let token, _, _) = registered.body, !Erasure.isPseudonym(token),
            let instance = try snapshot.instanceID(of: token)
        else { return }
        _ = try LogRedaction.redact(
            [ErasureTarget(instance: instance, token: token, pseudonym: erasure.pseudonym, reason: erasure.reason)],
            txn: txn, schema: schema)
    }
}
