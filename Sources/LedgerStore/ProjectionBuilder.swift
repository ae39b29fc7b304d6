import Foundation
import LMDBKit
import LedgerCore

/// Folds log events into projections with the shared ``EventFold``, in transactions of bounded size.
///
/// Used by `rebuild` (into the ledger's own projections) and by `verify` (into a scratch environment).
enum ProjectionBuilder {
    /// Events per write transaction: bounds dirty pages (LMDB refuses huge transactions) and progress steps.
    static let chunkSize: UInt64 = 200_000

    /// Folds `events`, which must be consecutive from seq 1, into the projections of `txn`.
    static func fold(_ events: [LedgerEvent], into txn: LMDBTransaction, schema: LedgerSchema) throws {
        var projection = LMDBProjection(txn: txn, schema: schema)
        for event in events { try EventFold.apply(event, to: &projection) }
    }
}

extension Ledger {
    /// Clears every projection and folds the whole log into them again.
    ///
    /// Needs the writer lock (open the ledger read-write); while it runs, readers are told projections are
    /// being rebuilt, and a rebuild that stops half-way is detected and must be run again.
    ///
    /// - Parameter progress: called after each chunk with (events done, events in all).
    /// - Returns: the number of events folded.
    @discardableResult
    public func rebuildProjections(progress: (UInt64, UInt64) -> Void = { _, _ in }) throws -> UInt64 {
        guard options.mode == .readWrite else {
            throw StoreError(.invalidArgument, "rebuild needs the ledger open for writing (exclusive access)")
        }
        let schema = self.schema
        // Stop the group committer's use of the environment: the caller holds the only writer.
        let total = try environment.write { txn in
            let head = try LedgerSnapshot(txn: txn, schema: schema).head()
            for database in schema.projections { try txn.clear(database) }
            try txn.put(schema.meta, key: MetaKey.rebuildingThrough, value: UInt64(0))
            return head.seq
        }
        var done: UInt64 = 0
        progress(0, total)
        while done < total {
            let through = min(done + ProjectionBuilder.chunkSize, total)
            try environment.write { txn in
                let snapshot = LedgerSnapshot(txn: txn, schema: schema)
                var events: [LedgerEvent] = []
                events.reserveCapacity(Int(through - done))
                try snapshot.forEachEvent(from: done + 1, through: through) { event, _ in
                    events.append(event)
                    return true
                }
                guard events.count == Int(through - done) else {
                    throw StoreError(.corrupt, "the log is missing events between seq \(done + 1) and \(through)")
                }
                try ProjectionBuilder.fold(events, into: txn, schema: schema)
                try txn.put(schema.meta, key: MetaKey.rebuildingThrough, value: through)
            }
            done = through
            progress(done, total)
        }
        try environment.write { txn in _ = try txn.delete(schema.meta, key: MetaKey.rebuildingThrough) }
        logger.info("rebuilt projections", metadata: ["ledger.events": "\(total)"])
        return total
    }
}
