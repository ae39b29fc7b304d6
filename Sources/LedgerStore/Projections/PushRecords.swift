import LMDBKit
import LedgerCore

/// How `pushProgress` and `pushFailures` store the APNs pushes of each send (``LedgerSchema``):
///
/// - `pushProgress`: `send seq ‖ event seq` → `through instance u32 ‖ flags u8` (bit 0 finished, bit 1 expired),
///   one entry per `pushProgress` event, so that an audit can tell which event (and when) passed a recipient;
///   the key `0 ‖ 0` holds the seq every send up to which is settled;
/// - `pushFailures`: `send seq ‖ instance` → `kind u8 ‖ status u16 ‖ event seq u64 ‖ reason`.
package enum PushRecords {
    static let settledKey = key(0, 0)

    static func key(_ sendSeq: UInt64, _ second: UInt64) -> [UInt8] {
        var bytes = ByteWriter(capacity: 16)
        bytes.append(sendSeq)
        bytes.append(second)
        return bytes.bytes
    }

    static func failureKey(_ sendSeq: UInt64, _ instance: InstanceID) -> [UInt8] {
        var bytes = ByteWriter(capacity: 12)
        bytes.append(sendSeq)
        bytes.append(instance)
        return bytes.bytes
    }

    static func progressValue(through: InstanceID, finished: Bool, expired: Bool) -> [UInt8] {
        var bytes = ByteWriter(capacity: 5)
        bytes.append(through)
        bytes.bytes.append((finished ? 1 : 0) | (expired ? 2 : 0))
        return bytes.bytes
    }

    static let kinds: [PushFailure.Kind] = [.unregistered, .badDeviceToken, .rejected]

    static func failureValue(_ failure: PushFailure, at seq: UInt64) -> [UInt8] {
        var bytes = ByteWriter(capacity: 11 + failure.reason.utf8.count)
        bytes.bytes.append(UInt8(kinds.firstIndex(of: failure.kind)!))
        bytes.append(failure.status)
        bytes.append(seq)
        bytes.append(failure.reason)
        return bytes.bytes
    }

    /// One send's progress as its last event left it, with that event's seq.
    package struct State: Equatable, Sendable {
        package var through: InstanceID
        package var finished: Bool
        package var expired: Bool
        package var seq: UInt64
    }

    /// Every progress event of the send at `sendSeq`, oldest first.
    static func progress(of sendSeq: UInt64, txn: LMDBTransaction, schema: LedgerSchema) throws -> [State] {
        var states: [State] = []
        try txn.withCursor(schema.pushProgress) { cursor in
            try cursor.forEach(from: key(sendSeq, 0)) { entry in
                guard entry.key.count == 16, entry.key.loadBigEndianUInt64(at: 0) == sendSeq else { return false }
                guard entry.value.count == 5, entry.value[4] <= 3 else {
                    throw StoreError(.corrupt, "a push progress entry of send \(sendSeq) has the wrong shape")
                }
                states.append(
                    State(
                        through: entry.value.loadBigEndianUInt32(at: 0), finished: entry.value[4] & 1 != 0,
                        expired: entry.value[4] & 2 != 0, seq: entry.key.loadBigEndianUInt64(at: 8)))
                return true
            }
        }
        return states
    }

    /// A recipient's failed push, with the seq of the event that recorded it.
    static func failure(of sendSeq: UInt64, instance: InstanceID, txn: LMDBTransaction, schema: LedgerSchema)
        throws
        -> (kind: PushFailure.Kind, status: UInt16, reason: String, seq: UInt64)?
    {
        try txn.withValue(in: schema.pushFailures, forKey: failureKey(sendSeq, instance)) { value in
            guard let value else { return nil }
            guard value.count >= 11, Int(value[0]) < kinds.count else {
                throw StoreError(.corrupt, "a push failure entry of send \(sendSeq) has the wrong shape")
            }
            return (
                kinds[Int(value[0])], UInt16(value[1]) << 8 | UInt16(value[2]),
                String(decoding: value[11...], as: UTF8.self),
                value.loadBigEndianUInt64(at: 3)
            )
        }
    }

    static func settledThrough(txn: LMDBTransaction, schema: LedgerSchema) throws -> UInt64 {
        try txn.withValue(in: schema.pushProgress, forKey: settledKey) { $0?.loadBigEndianUInt64() } ?? 0
    }
}
