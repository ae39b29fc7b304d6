import LMDBKit
import LedgerCore

/// An APNs device token an instance held over a span of seqs (``InstanceAudit/apnsTokens``).
public struct HeldAPNsToken: Sendable, Equatable {
    public var token: APNsDeviceToken
    public var interval: HeldInterval
}

/// How `apnsTokens` and `apnsTokenHistory` store APNs device tokens (``LedgerSchema``): the token held now
/// under the instance (`since ‖ sandbox ‖ token`), a token no longer held under the instance and its start
/// (`end ‖ sandbox ‖ token`).
enum APNsTokenRecord {
    /// `seq ‖ sandbox ‖ token`: the value of either database (`seq` is the start now, the end in history).
    static func value(_ token: APNsDeviceToken, seq: UInt64) -> [UInt8] {
        var bytes = ByteWriter(capacity: 9 + token.bytes.count)
        bytes.append(seq)
        bytes.bytes.append(token.sandbox ? 1 : 0)
        bytes.append(token.bytes)
        return bytes.bytes
    }

    /// `instance ‖ start`: the key of `apnsTokenHistory`.
    static func historyKey(_ instance: InstanceID, start: UInt64) -> [UInt8] {
        var bytes = ByteWriter(capacity: 12)
        bytes.append(instance)
        bytes.append(start)
        return bytes.bytes
    }

    /// Reads a value: the seq it holds and the token.
    ///
    /// - Throws: `StoreError.corrupt` for a value of another shape (a damaged file).
    static func decode(_ value: UnsafeRawBufferPointer) throws -> (seq: UInt64, token: APNsDeviceToken) {
        guard value.count >= 9, value[8] <= 1,
            let token = try? APNsDeviceToken(bytes: Array(value[9...]), sandbox: value[8] == 1)
        else { throw StoreError(.corrupt, "an APNs token entry has \(value.count) bytes or a bad flag") }
        return (value.loadBigEndianUInt64(at: 0), token)
    }

    /// The token `instance` holds now, with the seq it was set at.
    static func current(of instance: InstanceID, txn: LMDBTransaction, schema: LedgerSchema) throws -> (
        since: UInt64, token: APNsDeviceToken
    )? {
        try txn.withValue(in: schema.apnsTokens, forKey: instance) { value in
            try value.map { value in
                let (since, token) = try decode(value)
                return (since, token)
            }
        }
    }

    /// Every token `instance` has held, oldest first (the one held now last, with no end).
    static func history(of instance: InstanceID, txn: LMDBTransaction, schema: LedgerSchema) throws
        -> [HeldAPNsToken]
    {
        var records: [HeldAPNsToken] = []
        let prefix = historyKey(instance, start: 0)
        try txn.withCursor(schema.apnsTokenHistory) { cursor in
            try cursor.forEach(from: prefix) { entry in
                guard entry.key.count == 12, entry.key.loadBigEndianUInt32(at: 0) == instance else { return false }
                let (end, token) = try decode(entry.value)
                records.append(
                    HeldAPNsToken(
                        token: token, interval: HeldInterval(start: entry.key.loadBigEndianUInt64(at: 4), end: end)))
                return true
            }
        }
        if let current = try current(of: instance, txn: txn, schema: schema) {
            records.append(HeldAPNsToken(token: current.token, interval: HeldInterval(start: current.since, end: nil)))
        }
        return records
    }

    /// The token `instance` held after applying event `seq`.
    static func token(of instance: InstanceID, at seq: UInt64, txn: LMDBTransaction, schema: LedgerSchema) throws
        -> APNsDeviceToken?
    {
        if let current = try current(of: instance, txn: txn, schema: schema), current.since <= seq {
            return current.token
        }
        // An instance holds few tokens over its life: its history is read in order.
        var held: APNsDeviceToken?
        try txn.withCursor(schema.apnsTokenHistory) { cursor in
            try cursor.forEach(from: historyKey(instance, start: 0)) { entry in
                guard entry.key.count == 12, entry.key.loadBigEndianUInt32(at: 0) == instance,
                    entry.key.loadBigEndianUInt64(at: 4) <= seq
                else { return false }
                let (end, token) = try decode(entry.value)
                if seq < end { held = token }
                return held == nil
            }
        }
        return held
    }

    /// Sets (`token`) or clears (`nil`) the token of `instance` at `seq`, moving the one it held to history.
    static func set(
        _ token: APNsDeviceToken?, of instance: InstanceID, at seq: UInt64, txn: LMDBTransaction, schema: LedgerSchema
    ) throws {
        if let held = try current(of: instance, txn: txn, schema: schema) {
            try txn.put(
                schema.apnsTokenHistory, key: historyKey(instance, start: held.since),
                value: value(held.token, seq: seq))
        }
        if let token {
            try txn.put(schema.apnsTokens, key: instance, value: value(token, seq: seq))
        } else {
            _ = try txn.delete(schema.apnsTokens, key: instance)
        }
    }

    /// Removes every APNs token `instance` holds or held (an erasure).
    static func forget(_ instance: InstanceID, txn: LMDBTransaction, schema: LedgerSchema) throws {
        _ = try txn.delete(schema.apnsTokens, key: instance)
        var starts: [UInt64] = []
        try txn.withCursor(schema.apnsTokenHistory) { cursor in
            try cursor.forEach(from: historyKey(instance, start: 0)) { entry in
                guard entry.key.count == 12, entry.key.loadBigEndianUInt32(at: 0) == instance else { return false }
                starts.append(entry.key.loadBigEndianUInt64(at: 4))
                return true
            }
        }
        for start in starts { _ = try txn.delete(schema.apnsTokenHistory, key: historyKey(instance, start: start)) }
    }
}
