import LedgerCore
import LedgerStore

/// One erasure as `ledger audit erasures` and `GET …/audit/erasures` list it: when, by whom, why, and the
/// name the device has from then on. Nothing here identifies the device but its pseudonym.
public struct ErasureRecord: Sendable, Equatable {
    /// The seq of the `erased` event.
    public var seq: UInt64
    public var time: LedgerTime
    /// The credential that erased it.
    public var actor: String
    public var erasure: Erasure
}

extension LedgerSnapshot {
    /// Every erasure in the log, oldest first: one pass over the log (an audit question, not a hot path).
    public func erasures() throws -> [ErasureRecord] {
        var records: [ErasureRecord] = []
        try forEachEvent { event, _ in
            if case .erased(let erasure) = event.body {
                records.append(ErasureRecord(seq: event.seq, time: event.time, actor: event.actor, erasure: erasure))
            }
            return true
        }
        return records
    }
}
