import LMDBKit
import LedgerCore

extension Ledger {
    /// The devices whose registration ended (unregistered or expired) before `cutoff` and that are not
    /// registered now nor erased: those a project's `identifierRetention` erases. The longest ended first, at
    /// most `limit`.
    ///
    /// One read of every instance (a lookup each in `instances`, `universe` and `universeHistory`): a sweep's cost,
    /// bounded by the number of devices the project ever had.
    ///
    /// - Note: Thread-safe. Never log what it returns: the tokens are identifiers.
    public func endedRegistrations(before cutoff: LedgerTime, limit: Int) throws -> [RegistrationToken] {
        try read { snapshot in
            var ended: [(token: RegistrationToken, end: UInt64)] = []
            let bound = try snapshot.instanceIDBound()
            guard bound > 1 else { return [] }
            guard cutoff.microseconds > Int64.min else { return [] }
            let lastOld = try snapshot.seq(atOrBefore: LedgerTime(microseconds: cutoff.microseconds - 1))
            guard lastOld > 0 else { return [] }
            for id in 1..<min(bound, Int(InstanceID.max)) {
                let instance = InstanceID(id)
                guard let token = try snapshot.token(of: instance), !Erasure.isPseudonym(token),
                    try snapshot.registeredSince(instance) == nil,
                    let end = try snapshot.closedRegistrations(of: instance).compactMap(\.end).max(), end <= lastOld
                else { continue }
                ended.append((token, end))
            }
            return ended.sorted { $0.end < $1.end }.prefix(max(0, limit)).map(\.token)
        }
    }

    /// The last seq a retention sweep looked at (0: none yet); every content of a sealed send at or before it
    /// is forgotten.
    public func retentionSweptThrough() throws -> UInt64 {
        try read { try ContentRetention.sweptThrough(txn: $0.txn, schema: $0.schema) }
    }
}
