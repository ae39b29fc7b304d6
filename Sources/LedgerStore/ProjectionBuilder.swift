import Foundation
import LMDBKit
import LedgerCore

/// Folds a whole log into fresh projections with the shared ``EventFold``: in memory first
/// (``BulkProjection``), then written in key order.
///
/// Used by `rebuild` (into the ledger's own, cleared projections) and by `verify` (into a scratch environment).
enum ProjectionBuilder {
    /// How often progress is reported while folding.
    static let progressStep: UInt64 = 100_000

    /// Folds events `1...through` read through `snapshot` and writes the projections into `environment`.
    static func build(
        from snapshot: LedgerSnapshot, through: UInt64, into environment: LMDBEnvironment, schema: LedgerSchema,
        progress: (UInt64, UInt64) -> Void = { _, _ in }
    ) throws {
        var projection = BulkProjection()
        var expected: UInt64 = 1
        try snapshot.forEachEvent(from: 1, through: through) { event, _ in
            guard event.seq == expected else {
                throw StoreError(.corrupt, "the log has no event at seq \(expected)")
            }
            try EventFold.apply(event, to: &projection)
            if expected % progressStep == 0 { progress(expected, through) }
            expected += 1
            return true
        }
        guard expected == through + 1 else {
            throw StoreError(.corrupt, "the log ends at seq \(expected - 1), before its head \(through)")
        }
        try projection.write(to: environment, schema: schema)
        progress(through, through)
    }
}

extension Ledger {
    /// Clears every projection and folds the whole log into them again.
    ///
    /// Needs the writer lock (open the ledger read-write); while it runs, readers are told projections are
    /// being rebuilt, and a rebuild that stops half-way is detected and must be run again.
    ///
    /// - Parameter progress: called now and then with (events done, events in all).
    /// - Returns: the number of events folded.
    @discardableResult
    public func rebuildProjections(progress: (UInt64, UInt64) -> Void = { _, _ in }) throws -> UInt64 {
        guard options.mode == .readWrite else {
            throw StoreError(.invalidArgument, "rebuild needs the ledger open for writing (exclusive access)")
        }
        let schema = self.schema
        let total = try environment.write { txn in
            let head = try LedgerSnapshot(txn: txn, schema: schema).head()
            for database in schema.projections { try txn.clear(database) }
            try txn.put(schema.meta, key: MetaKey.rebuildingThrough, value: UInt64(0))
            return head.seq
        }
        progress(0, total)
        try environment.read { txn in
            try ProjectionBuilder.build(
                from: LedgerSnapshot(txn: txn, schema: schema), through: total, into: environment, schema: schema,
                progress: progress)
        }
        try environment.write { txn in _ = try txn.delete(schema.meta, key: MetaKey.rebuildingThrough) }
        logger.info("rebuilt projections", metadata: ["ledger.events": "\(total)"])
        return total
    }
}
