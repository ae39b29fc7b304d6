internal import CLMDB

/// One key/value entry lent by a cursor; valid until the cursor moves, the transaction writes, or it ends.
public struct LMDBEntry {
    public let key: UnsafeRawBufferPointer
    public let value: UnsafeRawBufferPointer
}

/// A position in a database. Created only by ``LMDBTransaction/withCursor(_:_:)``.
///
/// Positioning methods return the entry at the new position, or `nil` when there is none.
///
/// - Note: Not thread-safe; valid only inside the `withCursor` closure.
public final class LMDBCursor {
    private var handle: OpaquePointer?
    public let database: LMDBDatabase
    private let health: TransactionHealth

    init(handle: OpaquePointer, database: LMDBDatabase, health: TransactionHealth) {
        self.handle = handle
        self.database = database
        self.health = health
    }

    func close() {
        if let handle { mdb_cursor_close(handle) }
        handle = nil
    }

    @inline(__always)
    private func get(_ op: MDB_cursor_op, key: UnsafeRawBufferPointer? = nil, value: UnsafeRawBufferPointer? = nil)
        throws(LMDBError) -> LMDBEntry?
    {
        var keyValue = key.map { MDB_val($0) } ?? MDB_val()
        var dataValue = value.map { MDB_val($0) } ?? MDB_val()
        let result = health.perform { mdb_cursor_get(handle, &keyValue, &dataValue, op) }
        if result == MDB_NOTFOUND { return nil }
        try health.check(result, "mdb_cursor_get(\(database.name))")
        return LMDBEntry(key: keyValue.buffer, value: dataValue.buffer)
    }

    /// The first entry of the database.
    public func first() throws(LMDBError) -> LMDBEntry? { try get(MDB_FIRST) }
    /// The last entry of the database.
    public func last() throws(LMDBError) -> LMDBEntry? { try get(MDB_LAST) }
    /// The next entry (the next duplicate, or the first of the next key).
    public func next() throws(LMDBError) -> LMDBEntry? { try get(MDB_NEXT) }
    /// The entry before the current one.
    public func previous() throws(LMDBError) -> LMDBEntry? { try get(MDB_PREV) }
    /// The next value of the current key (duplicate-sorted databases).
    public func nextDuplicate() throws(LMDBError) -> LMDBEntry? { try get(MDB_NEXT_DUP) }

    /// The first entry with exactly `key`.
    public func find(_ key: some LMDBBytes) throws -> LMDBEntry? {
        try key.withLMDBBytes { bytes throws(LMDBError) in try get(MDB_SET_KEY, key: bytes) }
    }

    /// The first entry whose key is at or after `key`.
    public func seek(_ key: some LMDBBytes) throws -> LMDBEntry? {
        try key.withLMDBBytes { bytes throws(LMDBError) in try get(MDB_SET_RANGE, key: bytes) }
    }

    /// In a duplicate-sorted database: the first value of `key` at or after `value`.
    public func seek(_ key: some LMDBBytes, value: some LMDBBytes) throws -> LMDBEntry? {
        try key.withLMDBBytes { keyBytes in
            try value.withLMDBBytes { valueBytes throws(LMDBError) in
                try get(MDB_GET_BOTH_RANGE, key: keyBytes, value: valueBytes)
            }
        }
    }

    /// The number of values of the current key (1 outside duplicate-sorted databases).
    public func duplicateCount() throws(LMDBError) -> Int {
        var count = 0
        try health.check(health.perform { mdb_cursor_count(handle, &count) }, "mdb_cursor_count(\(database.name))")
        return count
    }

    /// Calls `body` for each entry from the cursor's start position onwards until it returns `false`.
    ///
    /// - Parameter start: `nil` for the first entry, or a key to start at (or after).
    public func forEach(from start: (some LMDBBytes)? = [UInt8]?.none, _ body: (LMDBEntry) throws -> Bool) throws {
        var entry = try start.map { try seek($0) } ?? first()
        while let current = entry {
            guard try body(current) else { return }
            entry = try next()
        }
    }

    /// Calls `body` with the values of `key` a page at a time, in order, until it returns `false`.
    ///
    /// For duplicate-sorted databases opened with `.duplicateFixed`: each chunk is a run of whole values
    /// laid end to end (`MDB_GET_MULTIPLE`), so a key with a million values costs a few thousand calls.
    public func forEachValueChunk(of key: some LMDBBytes, _ body: (UnsafeRawBufferPointer) throws -> Bool) throws {
        guard let first = try find(key) else { return }
        // A key with a single value has no duplicate sub-database, and MDB_GET_MULTIPLE returns nothing for it.
        if try duplicateCount() == 1 {
            _ = try body(first.value)
            return
        }
        var chunk = try get(MDB_GET_MULTIPLE)
        while let current = chunk {
            guard try body(current.value) else { return }
            chunk = try get(MDB_NEXT_MULTIPLE)
        }
    }

    /// Stores a run of fixed-size values under `key` in one call (`MDB_MULTIPLE`), in a write transaction.
    ///
    /// For duplicate-sorted databases opened with `.duplicateFixed`. LMDB positions on the key once and
    /// then adds each value to its duplicates, so a bulk load of a key with many values costs one tree
    /// descent instead of one per value. With `.appendDuplicate` the values must be in byte order and
    /// after any the key already holds.
    ///
    /// - Parameters:
    ///   - values: the values laid end to end; at least one, `values.count` a multiple of `valueSize`.
    ///   - valueSize: the size of every value of the database.
    /// - Throws: `LMDBError` (`.keyExists` when `.appendDuplicate` finds the values out of order;
    ///   `.incompatible` when the database is not `.duplicateFixed`). The transaction must then be aborted:
    ///   some of the values may have been written.
    public func putDuplicates(
        _ key: some LMDBBytes, values: UnsafeRawBufferPointer, valueSize: Int, flags: LMDBWriteFlags = []
    ) throws(LMDBError) {
        precondition(valueSize > 0 && !values.isEmpty && values.count % valueSize == 0, "a run of whole values")
        let result = key.withLMDBBytes { keyBytes in
            var keyValue = MDB_val(keyBytes)
            // MDB_MULTIPLE takes two MDB_vals: the first value (size and address), then the count.
            var data = (
                MDB_val(mv_size: valueSize, mv_data: UnsafeMutableRawPointer(mutating: values.baseAddress)),
                MDB_val(mv_size: values.count / valueSize, mv_data: nil)
            )
            return withUnsafeMutablePointer(to: &data) { pair in
                pair.withMemoryRebound(to: MDB_val.self, capacity: 2) { vals in
                    health.perform { mdb_cursor_put(handle, &keyValue, vals, flags.rawValue | UInt32(MDB_MULTIPLE)) }
                }
            }
        }
        try health.check(result, "mdb_cursor_put(\(database.name), MDB_MULTIPLE)")
    }

    /// Calls `body` for each value of `key` (a duplicate-sorted database) until it returns `false`.
    public func forEachValue(of key: some LMDBBytes, _ body: (UnsafeRawBufferPointer) throws -> Bool) throws {
        var entry = try find(key)
        while let current = entry {
            guard try body(current.value) else { return }
            entry = try nextDuplicate()
        }
    }
}
