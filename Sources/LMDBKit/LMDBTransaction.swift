internal import CLMDB

/// A read or write transaction. Created only by ``LMDBEnvironment/read(_:)`` and ``LMDBEnvironment/write(_:)``,
/// and valid only inside that closure.
///
/// Buffers the transaction lends (values, cursor entries) point into the memory map: they are valid until
/// the transaction ends or, in a write transaction, until the next write. Copy or decode them right away.
///
/// - Note: Not thread-safe: use a transaction on the thread that runs its closure, and never across an `await`.
public final class LMDBTransaction {
    let handle: OpaquePointer
    public let environment: LMDBEnvironment
    public let isReadOnly: Bool
    private var finished = false
    /// ``cursor(_:)``'s cursors by database handle (small integers): an array index, where a dictionary
    /// hashed the handle on every point lookup.
    private var cachedCursors: [LMDBCursor?] = []
    /// ``put(_:key:value:flags:)``'s and ``delete(_:key:value:)``'s cursors by database handle (see there).
    private var writeCursors: [OpaquePointer?] = []
    let health: TransactionHealth

    /// LMDB's number of this transaction (`mdb_txn_id`): a write transaction's is one more than the last
    /// committed write's.
    public var id: UInt64 { UInt64(mdb_txn_id(handle)) }

    /// The first LMDB call of this transaction that failed, if any. A transaction with a failure never
    /// commits: ``LMDBEnvironment/write(_:)`` aborts it, whatever its body did with the error.
    public var failure: LMDBError? { health.failure }

    /// A child of `parent` (LMDB nested transaction): its changes join the parent's when it commits and
    /// vanish when it aborts; the parent may not be used meanwhile.
    private init(child parent: LMDBTransaction) throws(LMDBError) {
        var txn: OpaquePointer?
        try parent.health.check(
            parent.health.perform { mdb_txn_begin(parent.environment.handle, parent.handle, 0, &txn) }, "mdb_txn_begin")
        guard let txn else { throw LMDBError(code: .invalid, function: "mdb_txn_begin") }
        self.handle = txn
        self.environment = parent.environment
        self.isReadOnly = false
        self.health = TransactionHealth(
            transactionNumber: parent.environment.nextWriteTransactionNumber(),
            injector: parent.environment.options.faultInjector)
    }

    /// Runs `body` in a nested (child) write transaction: its changes join this transaction when `body`
    /// returns and are discarded when it throws — or when an LMDB call inside it failed, even one `body`
    /// caught. This transaction stays usable either way.
    ///
    /// - Throws: the child's first failed LMDB call when there was one, else what `body` threw.
    public func nested<R>(_ body: (LMDBTransaction) throws -> R) throws -> R {
        precondition(!isReadOnly, "nested transactions are for writes")
        let child = try LMDBTransaction(child: self)
        do {
            let result = try body(child)
            try child.commit()
            return result
        } catch {
            let failure = child.failure
            child.abort()
            throw failure ?? error
        }
    }

    init(environment: LMDBEnvironment, readOnly: Bool) throws(LMDBError) {
        var txn: OpaquePointer?
        var result = mdb_txn_begin(environment.handle, nil, readOnly ? UInt32(MDB_RDONLY) : 0, &txn)
        if result == MDB_MAP_RESIZED {
            // Another process grew the map; adopt its size and try once more.
            try environment.adoptMapSize()
            result = mdb_txn_begin(environment.handle, nil, readOnly ? UInt32(MDB_RDONLY) : 0, &txn)
        }
        try LMDBError.check(result, "mdb_txn_begin")
        guard let txn else { throw LMDBError(code: .invalid, function: "mdb_txn_begin") }
        self.handle = txn
        self.environment = environment
        self.isReadOnly = readOnly
        self.health =
            readOnly
            ? TransactionHealth(transactionNumber: 0, injector: nil)
            : TransactionHealth(
                transactionNumber: environment.nextWriteTransactionNumber(), injector: environment.options.faultInjector
            )
    }

    deinit {
        if !finished {
            closeCachedCursors()
            mdb_txn_abort(handle)
        }
    }

    /// Commits, unless an LMDB call of this transaction failed: then it aborts and throws that failure.
    func commit() throws(LMDBError) {
        precondition(!finished, "transaction already finished")
        if let failure = health.failure {
            abort()
            throw failure
        }
        finished = true
        closeCachedCursors()
        var called = false
        let result = health.perform {
            called = true
            return mdb_txn_commit(handle)
        }
        // mdb_txn_commit frees the transaction whether or not it succeeds; an injected failure never called it.
        if !called { mdb_txn_abort(handle) }
        try health.check(result, "mdb_txn_commit")
    }

    func abort() {
        guard !finished else { return }
        finished = true
        closeCachedCursors()
        mdb_txn_abort(handle)
    }

    /// Closes the cursors this transaction keeps on `database` (before its handle is closed).
    private func closeCursors(of database: LMDBDatabase) {
        let index = Int(database.dbi)
        if index < cachedCursors.count, let cursor = cachedCursors[index] {
            cursor.close()
            cachedCursors[index] = nil
        }
        if index < writeCursors.count, let cursor = writeCursors[index] {
            mdb_cursor_close(cursor)
            writeCursors[index] = nil
        }
    }

    private func closeCachedCursors() {
        for cursor in cachedCursors { cursor?.close() }
        cachedCursors.removeAll()
        for cursor in writeCursors { if let cursor { mdb_cursor_close(cursor) } }
        writeCursors.removeAll()
    }

    // MARK: Databases

    /// Opens the named database, creating it when `flags` contains `.create` (write transactions only).
    /// The handle stays valid for the environment's lifetime once this transaction commits.
    public func openDatabase(_ name: String, flags: LMDBDatabase.Flags = []) throws(LMDBError) -> LMDBDatabase {
        var dbi: MDB_dbi = 0
        try health.check(health.perform { mdb_dbi_open(handle, name, flags.rawValue, &dbi) }, "mdb_dbi_open(\(name))")
        environment.noteOpened(name, flags: flags.rawValue, dbi: dbi)
        return LMDBDatabase(dbi: dbi, name: name, allowsDuplicates: flags.contains(.duplicateSort))
    }

    /// The number of entries (key/value pairs, counting each duplicate) in `database`.
    public func count(_ database: LMDBDatabase) throws(LMDBError) -> Int {
        var stat = MDB_stat()
        try health.check(health.perform { mdb_stat(handle, database.dbi, &stat) }, "mdb_stat(\(database.name))")
        return stat.ms_entries
    }

    /// Deletes every entry of `database`, keeping the database.
    public func clear(_ database: LMDBDatabase) throws(LMDBError) {
        try health.check(health.perform { mdb_drop(handle, database.dbi, 0) }, "mdb_drop(\(database.name))")
    }

    /// Deletes `database` itself, entries and name, from the environment; its handle is closed and must not
    /// be used again. (Tests make older layouts with it.)
    public func drop(_ database: LMDBDatabase) throws(LMDBError) {
        closeCursors(of: database)
        try health.check(health.perform { mdb_drop(handle, database.dbi, 1) }, "mdb_drop(\(database.name), delete)")
    }

    // MARK: Reads

    /// Lends the value stored under `key` (the first one, in a duplicate-sorted database) to `body`,
    /// or `nil` when there is none.
    public func withValue<R>(
        in database: LMDBDatabase, forKey key: some LMDBBytes, _ body: (UnsafeRawBufferPointer?) throws -> R
    ) throws -> R {
        var data = MDB_val()
        let result = key.withLMDBBytes { keyBytes in
            var keyValue = MDB_val(keyBytes)
            return health.perform { mdb_get(handle, database.dbi, &keyValue, &data) }
        }
        if result == MDB_NOTFOUND { return try body(nil) }
        try health.check(result, "mdb_get(\(database.name))")
        return try body(data.buffer)
    }

    /// A copy of the value stored under `key`, or `nil`.
    public func value(in database: LMDBDatabase, forKey key: some LMDBBytes) throws -> [UInt8]? {
        try withValue(in: database, forKey: key) { $0.map { Array($0) } }
    }

    /// Whether `key` is present.
    public func contains(_ database: LMDBDatabase, key: some LMDBBytes) throws -> Bool {
        try withValue(in: database, forKey: key) { $0 != nil }
    }

    // MARK: Writes

    /// Stores `value` under `key`.
    ///
    /// - Returns: `false` when `flags` contains `.noOverwrite` or `.noDuplicateData` and the entry exists
    ///   (nothing is written); `true` otherwise.
    @discardableResult
    public func put(
        _ database: LMDBDatabase, key: some LMDBBytes, value: some LMDBBytes, flags: LMDBWriteFlags = []
    ) throws(LMDBError) -> Bool {
        let cursor = try writeCursor(database)
        let result = key.withLMDBBytes { keyBytes in
            value.withLMDBBytes { valueBytes in
                var keyValue = MDB_val(keyBytes)
                var dataValue = MDB_val(valueBytes)
                return health.perform { mdb_cursor_put(cursor, &keyValue, &dataValue, flags.rawValue) }
            }
        }
        if result == MDB_KEYEXIST && !flags.isDisjoint(with: [.noOverwrite, .noDuplicateData]) { return false }
        try health.check(result, "mdb_put(\(database.name))")
        return true
    }

    /// Deletes `key` (every value of it in a duplicate-sorted database), or only the pair `key`/`value`.
    ///
    /// - Returns: whether anything was deleted.
    @discardableResult
    public func delete(_ database: LMDBDatabase, key: some LMDBBytes, value: (some LMDBBytes)? = [UInt8]?.none)
        throws(LMDBError) -> Bool
    {
        // What `mdb_del` does, through the kept cursor: find the entry, then delete it — every value of the key
        // when no value is given; a value is ignored, as `mdb_del` does, unless the database holds duplicates.
        let cursor = try writeCursor(database)
        let result = key.withLMDBBytes { keyBytes in
            var keyValue = MDB_val(keyBytes)
            guard let value, database.allowsDuplicates else {
                return health.perform {
                    var found = MDB_val()
                    let result = mdb_cursor_get(cursor, &keyValue, &found, MDB_SET)
                    return result == MDB_SUCCESS ? mdb_cursor_del(cursor, UInt32(MDB_NODUPDATA)) : result
                }
            }
            return value.withLMDBBytes { valueBytes in
                var dataValue = MDB_val(valueBytes)
                return health.perform {
                    let result = mdb_cursor_get(cursor, &keyValue, &dataValue, MDB_GET_BOTH)
                    return result == MDB_SUCCESS ? mdb_cursor_del(cursor, 0) : result
                }
            }
        }
        if result == MDB_NOTFOUND { return false }
        try health.check(result, "mdb_del(\(database.name))")
        return true
    }

    /// The cursor ``put(_:key:value:flags:)`` and ``delete(_:key:value:)`` write through, one per database,
    /// kept for the transaction: `mdb_put` makes a fresh cursor per call, which searches from the root, where
    /// a cursor left on the page of the last write searches only that page when the next key falls in it
    /// (LMDB's `mdb_cursor_set`). Opening it is not an LMDB call the fault injector counts, so the calls of a
    /// transaction are numbered as they were with `mdb_put`.
    private func writeCursor(_ database: LMDBDatabase) throws(LMDBError) -> OpaquePointer {
        let index = Int(database.dbi)
        if index < writeCursors.count, let cursor = writeCursors[index] { return cursor }
        var cursor: OpaquePointer?
        try health.check(mdb_cursor_open(handle, database.dbi, &cursor), "mdb_cursor_open(\(database.name))")
        guard let cursor else { throw LMDBError(code: .invalid, function: "mdb_cursor_open") }
        if index >= writeCursors.count {
            writeCursors.append(contentsOf: repeatElement(nil, count: index + 1 - writeCursors.count))
        }
        writeCursors[index] = cursor
        return cursor
    }

    // MARK: Cursors

    /// A cursor over `database` owned by the transaction and reused by every call: for point lookups
    /// (`find`, `seek`, `duplicateCount`) on hot paths, where opening a cursor per call would dominate.
    /// Its position is whatever the last caller left; do not iterate with it while others may use it —
    /// use ``withCursor(_:_:)`` for iteration.
    public func cursor(_ database: LMDBDatabase) throws(LMDBError) -> LMDBCursor {
        let index = Int(database.dbi)
        if index < cachedCursors.count, let cursor = cachedCursors[index] { return cursor }
        var cursor: OpaquePointer?
        try health.check(
            health.perform { mdb_cursor_open(handle, database.dbi, &cursor) }, "mdb_cursor_open(\(database.name))")
        guard let cursor else { throw LMDBError(code: .invalid, function: "mdb_cursor_open") }
        let wrapper = LMDBCursor(handle: cursor, database: database, health: health)
        if index >= cachedCursors.count {
            cachedCursors.append(contentsOf: repeatElement(nil, count: index + 1 - cachedCursors.count))
        }
        cachedCursors[index] = wrapper
        return wrapper
    }

    /// Runs `body` with a cursor over `database`, closing the cursor when `body` returns.
    public func withCursor<R>(_ database: LMDBDatabase, _ body: (LMDBCursor) throws -> R) throws -> R {
        var cursor: OpaquePointer?
        try health.check(
            health.perform { mdb_cursor_open(handle, database.dbi, &cursor) }, "mdb_cursor_open(\(database.name))")
        guard let cursor else { throw LMDBError(code: .invalid, function: "mdb_cursor_open") }
        let wrapper = LMDBCursor(handle: cursor, database: database, health: health)
        defer { wrapper.close() }
        return try body(wrapper)
    }
}

// A non-null address for empty values; LMDB never writes through input values, and the byte is never read
// because the size is zero.
nonisolated(unsafe) private let emptyByte = UnsafeMutableRawPointer.allocate(byteCount: 1, alignment: 1)

extension MDB_val {
    /// Borrows `bytes` for one LMDB call; LMDB does not write through input values.
    @inline(__always)
    init(_ bytes: UnsafeRawBufferPointer) {
        self.init(mv_size: bytes.count, mv_data: UnsafeMutableRawPointer(mutating: bytes.baseAddress) ?? emptyByte)
    }

    @inline(__always)
    var buffer: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: mv_data, count: mv_size) }
}
