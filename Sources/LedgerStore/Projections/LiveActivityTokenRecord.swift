import LMDBKit
import LedgerCore

/// An ActivityKit token an instance held for a scope over a span of seqs (``LedgerSnapshot/liveActivityTokens(of:)``).
public struct HeldLiveActivityToken: Sendable, Equatable {
    public var scope: LiveActivityScope
    public var token: APNsDeviceToken
    public var interval: HeldInterval
}

/// How `liveActivityTokens` stores the ActivityKit tokens of instances (``LedgerSchema``), in three kinds of entry
/// told apart by their first byte:
///
/// - `0x01 ‖ scope ‖ instance u32` → `since u64 ‖ token`: the token held now (a topic's followers are together);
/// - `0x02 ‖ instance u32 ‖ scope ‖ start u64` → `end u64 ‖ token`: a token no longer held;
/// - `0x03 ‖ instance u32 ‖ scope` → empty: the scopes the instance holds a token for now.
///
/// A scope is `0x74 ('t') ‖ topic id u32` (a followed topic) or `0x73 ('s') ‖ length u8 ‖ attributes type` (a
/// push-to-start token): prefix-free, so that a scope's entries are one range. Tokens are held without their
/// environment: they are pushed in their device's (``APNsDestination``).
enum LiveActivityTokenRecord {
    static let currentKind: UInt8 = 1
    static let historyKind: UInt8 = 2
    static let scopeKind: UInt8 = 3

    static func scopeBytes(_ scope: LiveActivityScope) -> [UInt8] {
        var bytes = ByteWriter(capacity: 8)
        switch scope {
        case .topic(let topic):
            bytes.bytes.append(UInt8(ascii: "t"))
            bytes.append(topic)
        case .pushToStart(let type):
            let name = Array(type.utf8.prefix(255))
            bytes.bytes.append(UInt8(ascii: "s"))
            bytes.bytes.append(UInt8(name.count))
            bytes.append(name)
        }
        return bytes.bytes
    }

    /// The scope at the start of `bytes`, and how many bytes it takes.
    static func decodeScope(_ bytes: UnsafeRawBufferPointer) throws -> (LiveActivityScope, Int) {
        if bytes.count >= 5, bytes[0] == UInt8(ascii: "t") {
            return (.topic(bytes.loadBigEndianUInt32(at: 1)), 5)
        }
        if bytes.count >= 2, bytes[0] == UInt8(ascii: "s"), bytes.count >= 2 + Int(bytes[1]),
            let name = String(validating: bytes[2..<(2 + Int(bytes[1]))], as: UTF8.self)
        {
            return (.pushToStart(attributesType: name), 2 + Int(bytes[1]))
        }
        throw StoreError(.corrupt, "a Live Activity token entry has a malformed scope")
    }

    static func currentKey(_ instance: InstanceID, _ scope: LiveActivityScope) -> [UInt8] {
        var bytes = ByteWriter(capacity: 16)
        bytes.bytes.append(currentKind)
        bytes.append(scopeBytes(scope))
        bytes.append(instance)
        return bytes.bytes
    }

    /// `kind ‖ instance ‖ scope`: the start of an instance's history or scope entries (all of its scopes without one).
    private static func instanceKey(_ kind: UInt8, _ instance: InstanceID, _ scope: LiveActivityScope?) -> [UInt8] {
        var bytes = ByteWriter(capacity: 24)
        bytes.bytes.append(kind)
        bytes.append(instance)
        if let scope { bytes.append(scopeBytes(scope)) }
        return bytes.bytes
    }

    static func historyPrefix(_ instance: InstanceID, _ scope: LiveActivityScope?) -> [UInt8] {
        instanceKey(historyKind, instance, scope)
    }

    static func historyKey(_ instance: InstanceID, _ scope: LiveActivityScope, start: UInt64) -> [UInt8] {
        var bytes = ByteWriter(capacity: 24)
        bytes.append(historyPrefix(instance, scope))
        bytes.append(start)
        return bytes.bytes
    }

    static func scopeKey(_ instance: InstanceID, _ scope: LiveActivityScope?) -> [UInt8] {
        instanceKey(scopeKind, instance, scope)
    }

    /// `seq ‖ token`: the value of a current entry (`seq` its start) or a history entry (`seq` its end).
    static func value(_ token: APNsDeviceToken, seq: UInt64) -> [UInt8] {
        var bytes = ByteWriter(capacity: 8 + token.bytes.count)
        bytes.append(seq)
        bytes.append(token.bytes)
        return bytes.bytes
    }

    /// Reads a value: the seq it holds and the token.
    ///
    /// - Throws: `StoreError.corrupt` for a value of another shape (a damaged file).
    static func decode(_ value: UnsafeRawBufferPointer) throws -> (seq: UInt64, token: APNsDeviceToken) {
        guard value.count >= 8, let token = try? APNsDeviceToken(bytes: Array(value[8...]), sandbox: false) else {
            throw StoreError(.corrupt, "a Live Activity token entry has \(value.count) bytes")
        }
        return (value.loadBigEndianUInt64(at: 0), token)
    }

    /// The token `instance` holds for `scope` now, with the seq it was set at.
    static func current(
        of instance: InstanceID, scope: LiveActivityScope, txn: LMDBTransaction, schema: LedgerSchema
    ) throws -> (since: UInt64, token: APNsDeviceToken)? {
        try txn.withValue(in: schema.liveActivityTokens, forKey: currentKey(instance, scope)) { value in
            try value.map { value in
                let (since, token) = try decode(value)
                return (since, token)
            }
        }
    }

    /// The token `instance` held for `scope` after applying event `seq`.
    static func token(
        of instance: InstanceID, scope: LiveActivityScope, at seq: UInt64, txn: LMDBTransaction, schema: LedgerSchema
    ) throws -> APNsDeviceToken? {
        if let current = try current(of: instance, scope: scope, txn: txn, schema: schema), current.since <= seq {
            return current.token
        }
        let prefix = historyPrefix(instance, scope)
        var held: APNsDeviceToken?
        try txn.withCursor(schema.liveActivityTokens) { cursor in
            try cursor.forEach(from: prefix) { entry in
                guard entry.key.count == prefix.count + 8, entry.key.starts(with: prefix),
                    entry.key.loadBigEndianUInt64(at: prefix.count) <= seq
                else { return false }
                let (end, token) = try decode(entry.value)
                if seq < end { held = token }
                return held == nil
            }
        }
        return held
    }

    /// Sets (`token`) or retires (`nil`) the token of `instance` for `scope` at `seq`, moving the one it held to
    /// history.
    static func set(
        _ token: APNsDeviceToken?, of instance: InstanceID, scope: LiveActivityScope, at seq: UInt64,
        txn: LMDBTransaction, schema: LedgerSchema
    ) throws {
        if let held = try current(of: instance, scope: scope, txn: txn, schema: schema) {
            try txn.put(
                schema.liveActivityTokens, key: historyKey(instance, scope, start: held.since),
                value: value(held.token, seq: seq))
        }
        if let token {
            try txn.put(schema.liveActivityTokens, key: currentKey(instance, scope), value: value(token, seq: seq))
            try txn.put(schema.liveActivityTokens, key: scopeKey(instance, scope), value: [UInt8]())
        } else {
            _ = try txn.delete(schema.liveActivityTokens, key: currentKey(instance, scope))
            _ = try txn.delete(schema.liveActivityTokens, key: scopeKey(instance, scope))
        }
    }

    /// The instances that follow `topic` now, in instance order.
    static func followers(of topic: TopicID, txn: LMDBTransaction, schema: LedgerSchema) throws -> [InstanceID] {
        let prefix = [currentKind] + scopeBytes(.topic(topic))
        var instances: [InstanceID] = []
        try txn.withCursor(schema.liveActivityTokens) { cursor in
            try cursor.forEach(from: prefix) { entry in
                guard entry.key.count == prefix.count + 4, entry.key.starts(with: prefix) else { return false }
                instances.append(entry.key.loadBigEndianUInt32(at: prefix.count))
                return true
            }
        }
        return instances
    }

    /// The scopes `instance` holds a token for now.
    static func scopes(of instance: InstanceID, txn: LMDBTransaction, schema: LedgerSchema) throws
        -> [LiveActivityScope]
    {
        let prefix = scopeKey(instance, nil)
        var scopes: [LiveActivityScope] = []
        try txn.withCursor(schema.liveActivityTokens) { cursor in
            try cursor.forEach(from: prefix) { entry in
                guard entry.key.count > prefix.count, entry.key.starts(with: prefix) else { return false }
                scopes.append(try decodeScope(UnsafeRawBufferPointer(rebasing: entry.key[prefix.count...])).0)
                return true
            }
        }
        return scopes
    }

    /// Every token `instance` holds or held, by scope, oldest first in each.
    static func history(of instance: InstanceID, txn: LMDBTransaction, schema: LedgerSchema) throws
        -> [HeldLiveActivityToken]
    {
        var records: [HeldLiveActivityToken] = []
        let prefix = historyPrefix(instance, nil)
        try txn.withCursor(schema.liveActivityTokens) { cursor in
            try cursor.forEach(from: prefix) { entry in
                guard entry.key.count > prefix.count + 8, entry.key.starts(with: prefix) else { return false }
                let (scope, length) = try decodeScope(
                    UnsafeRawBufferPointer(rebasing: entry.key[prefix.count..<(entry.key.count - 8)]))
                guard prefix.count + length + 8 == entry.key.count else {
                    throw StoreError(.corrupt, "a Live Activity token history key is malformed")
                }
                let (end, token) = try decode(entry.value)
                records.append(
                    HeldLiveActivityToken(
                        scope: scope, token: token,
                        interval: HeldInterval(start: entry.key.loadBigEndianUInt64(at: entry.key.count - 8), end: end)
                    ))
                return true
            }
        }
        for scope in try scopes(of: instance, txn: txn, schema: schema) {
            if let held = try current(of: instance, scope: scope, txn: txn, schema: schema) {
                records.append(
                    HeldLiveActivityToken(
                        scope: scope, token: held.token, interval: HeldInterval(start: held.since, end: nil)))
            }
        }
        return records
    }

    /// Removes every token `instance` holds or held (an erasure).
    static func forget(_ instance: InstanceID, txn: LMDBTransaction, schema: LedgerSchema) throws {
        for scope in try scopes(of: instance, txn: txn, schema: schema) {
            _ = try txn.delete(schema.liveActivityTokens, key: currentKey(instance, scope))
        }
        for prefix in [historyPrefix(instance, nil), scopeKey(instance, nil)] {
            var keys: [[UInt8]] = []
            try txn.withCursor(schema.liveActivityTokens) { cursor in
                try cursor.forEach(from: prefix) { entry in
                    guard entry.key.starts(with: prefix) else { return false }
                    keys.append(Array(entry.key))
                    return true
                }
            }
            for key in keys { _ = try txn.delete(schema.liveActivityTokens, key: key) }
        }
    }
}
