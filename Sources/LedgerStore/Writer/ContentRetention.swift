import LMDBKit
import LedgerCore

/// Forgets the contents of old sends, inside the transaction that appends the `retention` event
/// (``LedgerEvent/Body/retention(_:)``): the leader's writer for its sweep, a follower for the leader's event.
///
/// Each `sent` record of the range whose content is held is rewritten with an empty message, its content seal
/// forgotten (``Seal/forgetting(_:reason:)``): the commitment takes the key's place, so the record's hash still
/// recomputes from its bytes and nothing left in it can be tested against the content. The fact, time, target,
/// audience and every other event stay. A send written before the ledger sealed its fields (no seals) keeps its
/// content: rewriting it would break its hash. It is counted (``RetentionSweep/unsealedContents``).
///
/// The rewrite is a pure function of the records and the event (its range and time), so a follower's copy ends
/// byte for byte as the leader's. The bytes replaced stay in LMDB's freed pages until the file is compacted,
/// which follows the commit (``ErasureCompaction``).
package enum ContentRetention {
    /// What a rewrite of one range did.
    package struct Count: Equatable {
        /// The sends in the range.
        package var sends: UInt64 = 0
        /// Those whose content this rewrite forgot.
        package var forgotten: UInt64 = 0
        /// Those written before the ledger sealed its fields, whose contents are kept.
        package var unsealed: UInt64 = 0
    }

    /// The range a sweep at cut-off `cutoff` looks at: from after the last range swept
    /// (``MetaKey/retentionThrough``) to the last event before `cutoff`, ending early at the `limit`-th send;
    /// `nil` when no event older than `cutoff` is left to look at.
    static func nextRange(before cutoff: LedgerTime, limit: Int, txn: LMDBTransaction, schema: LedgerSchema) throws
        -> ClosedRange<UInt64>?
    {
        let snapshot = LedgerSnapshot(txn: txn, schema: schema)
        let first = try sweptThrough(txn: txn, schema: schema) + 1
        guard cutoff.microseconds > Int64.min else { return nil }
        let lastOld = try snapshot.seq(atOrBefore: LedgerTime(microseconds: cutoff.microseconds - 1))
        guard lastOld >= first else { return nil }
        let sends = try snapshot.sendSeqs(from: first, through: lastOld, limit: max(1, limit))
        let through = sends.count == max(1, limit) ? sends[sends.count - 1] : lastOld
        return first...through
    }

    /// Rewrites every send in `range` whose content is held, forgotten for `reason`; records the range as swept.
    static func forget(_ range: ClosedRange<UInt64>, reason: String, txn: LMDBTransaction, schema: LedgerSchema)
        throws -> Count
    {
        let snapshot = LedgerSnapshot(txn: txn, schema: schema)
        var count = Count()
        var rewritten: [(seq: UInt64, record: [UInt8])] = []
        for seq in try snapshot.sendSeqs(from: range.lowerBound, through: range.upperBound) {
            count.sends += 1
            let record = try txn.withValue(in: schema.log, forKey: seq) { value -> [UInt8]? in
                guard let value else { return nil }
                let (hash, encoded) = try HashChain.split(record: value)
                let event = try EventCodec.decode(encoded)
                guard case .sent(var sent) = event.body else { return nil }
                guard var seals = event.seals, let last = seals.last else {
                    count.unsealed += 1
                    return nil
                }
                guard !sent.messageJSON.isEmpty else { return nil }
                if last.isForgotten {
                    // An erasure rewrote identifiers inside it (its commitment already stands for the original):
                    // the rest of the content goes now, and the reason says both.
                    seals[seals.count - 1].forgotten = Self.afterErasure(reason)
                } else {
                    seals[seals.count - 1] = last.forgetting(sent.messageJSON, reason: reason)
                }
                sent.messageJSON = []
                var forgotten = event
                forgotten.body = .sent(sent)
                forgotten.seals = seals
                return Array(hash) + EventCodec.encode(forgotten)
            }
            guard let record else { continue }
            rewritten.append((seq, record))
            count.forgotten += 1
        }
        for (seq, record) in rewritten { try txn.put(schema.log, key: seq, value: record) }
        try txn.put(schema.meta, key: MetaKey.retentionThrough, value: range.upperBound)
        return count
    }

    /// The reason of a content an erasure rewrote and a retention sweep then forgot: `erasure; <reason>`.
    /// (``ErasureAccount`` in `verify` counts such a record for any erasure before it: its content no longer says
    /// which device it named.)
    package static func afterErasure(_ reason: String) -> String { Seal.erasure + "; " + reason }

    /// The last seq a retention sweep looked at (0: none yet).
    static func sweptThrough(txn: LMDBTransaction, schema: LedgerSchema) throws -> UInt64 {
        try txn.withValue(in: schema.meta, forKey: MetaKey.retentionThrough) { value in
            guard let value else { return 0 }
            guard value.count == 8 else {
                throw StoreError(.corrupt, "meta \(MetaKey.retentionThrough) holds \(value.count) bytes")
            }
            return value.loadBigEndianUInt64()
        }
    }
}
