import LedgerStore
import Foundation
import LMDBKit
import LedgerCore

extension LedgerSnapshot {
    /// The event at `seq` as stored: its chain hash and its encoded bytes (what the hash covers after the
    /// previous hash).
    public func storedEvent(at seq: UInt64) throws -> (hash: [UInt8], encoded: [UInt8])? {
        try txn.withValue(in: schema.log, forKey: seq) { record in
            try record.map { record in
                let parts = try HashChain.split(record: record)
                return (Array(parts.hash), Array(parts.encodedEvent))
            }
        }
    }
}
