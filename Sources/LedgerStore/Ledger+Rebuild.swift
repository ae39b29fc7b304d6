import Foundation
import LMDBKit
import LedgerCore
import Logging

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
        let projection = try environment.read { txn in
            try ProjectionBuilder.fold(
                from: LedgerSnapshot(txn: txn, schema: schema), through: total, progress: progress)
        }
        try projection.write(to: environment, schema: schema)
        progress(total, total)
        try environment.write { txn in _ = try txn.delete(schema.meta, key: MetaKey.rebuildingThrough) }
        logger.info("rebuilt projections", metadata: ["ledger.events": "\(total)"])
        return total
    }
}
