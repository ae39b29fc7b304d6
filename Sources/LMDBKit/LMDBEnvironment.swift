internal import CLMDB

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// An LMDB environment: one memory-mapped database file holding named databases.
///
/// The environment is opened with `MDB_NOTLS`, so read transactions are not tied to a thread.
/// The map grows on `MDB_MAP_FULL` when written through ``write(_:)``.
///
/// - Note: Thread-safe. Any number of read transactions may run at once; write transactions are
///   serialized by LMDB itself (across processes too).
public final class LMDBEnvironment: @unchecked Sendable {
    // @unchecked: `handle` is an MDB_env*, which LMDB documents as safe to share between threads once
    // opened; the only mutation after open (mdb_env_set_mapsize) happens under `mapLock` held exclusively,
    // while every transaction holds it shared. `writeTransactions` is only touched by the thread that holds
    // LMDB's own writer mutex (right after mdb_txn_begin of a write transaction returned).

    /// Options for opening an environment.
    public struct Options: Sendable {
        /// Initial map size in bytes; the map doubles on `MDB_MAP_FULL` up to `maximumMapSize`.
        public var mapSize: Int = 1 << 30
        /// The map never grows beyond this many bytes.
        public var maximumMapSize: Int = 1 << 40
        /// The most named databases the environment can hold.
        public var maxDatabases: UInt32 = 32
        /// The most concurrent read transactions across all processes.
        public var maxReaders: UInt32 = 512
        /// Open without write access (the files must exist).
        public var readOnly = false
        /// Skip the fsync on commit. Only for throwaway data (benchmarks of non-durable baselines, scratch copies).
        public var noSync = false
        /// One fsync per commit instead of two: the meta page is not flushed (`MDB_NOMETASYNC`). Atomic and
        /// consistent, but a system crash may undo the last commit — for a ledger whose commits are durable
        /// elsewhere first (a cluster's replica: etcd holds them on a quorum, and the replica reads them back).
        public var noMetaSync = false
        /// Test-only: fails chosen LMDB calls of write transactions (see ``LMDBFaultInjector``).
        public var faultInjector: LMDBFaultInjector?

        public init() {}
    }

    /// Replaced only by ``compact()``, under `mapLock` held exclusively.
    private(set) var handle: OpaquePointer
    public let path: String
    public let options: Options
    private let mapLock: UnsafeMutablePointer<pthread_rwlock_t>
    private var writeTransactions = 0
    /// The named databases opened so far, in the order their handles were given (``compact()`` opens them
    /// again in that order, so that every ``LMDBDatabase`` held keeps naming the same one). Guarded by
    /// `databasesLock`.
    private var openedDatabases: [(name: String, flags: UInt32, dbi: MDB_dbi)] = []
    private let databasesLock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)

    /// Opens (creating if needed) the environment in directory `path`.
    ///
    /// - Throws: `LMDBError` if the directory cannot be opened or is not an LMDB environment.
    public init(path: String, options: Options = Options()) throws(LMDBError) {
        let env = try Self.openHandle(path: path, options: options, mapSize: options.mapSize)
        // Clear reader slots left by processes that died (kill -9) so they do not pin old pages.
        var dead: Int32 = 0
        _ = mdb_reader_check(env, &dead)
        self.handle = env
        self.path = path
        self.options = options
        self.mapLock = .allocate(capacity: 1)
        pthread_rwlock_init(mapLock, nil)
        pthread_mutex_init(databasesLock, nil)
    }

    /// Opens a fresh `MDB_env` on `path` with `options` and a map of `mapSize` bytes.
    private static func openHandle(path: String, options: Options, mapSize: Int) throws(LMDBError) -> OpaquePointer {
        var env: OpaquePointer?
        try LMDBError.check(mdb_env_create(&env), "mdb_env_create")
        guard let env else { throw LMDBError(code: .invalid, function: "mdb_env_create") }
        do {
            try LMDBError.check(mdb_env_set_maxdbs(env, MDB_dbi(options.maxDatabases)), "mdb_env_set_maxdbs")
            try LMDBError.check(mdb_env_set_maxreaders(env, options.maxReaders), "mdb_env_set_maxreaders")
            try LMDBError.check(mdb_env_set_mapsize(env, mapSize), "mdb_env_set_mapsize")
            var flags = UInt32(MDB_NOTLS)
            if options.readOnly { flags |= UInt32(MDB_RDONLY) }
            if options.noSync { flags |= UInt32(MDB_NOSYNC) }
            if options.noMetaSync { flags |= UInt32(MDB_NOMETASYNC) }
            try LMDBError.check(mdb_env_open(env, path, flags, 0o600), "mdb_env_open")
        } catch {
            mdb_env_close(env)
            throw error
        }
        return env
    }

    deinit {
        mdb_env_close(handle)
        pthread_rwlock_destroy(mapLock)
        mapLock.deallocate()
        pthread_mutex_destroy(databasesLock)
        databasesLock.deallocate()
    }

    /// Notes a database handle given by `mdb_dbi_open` (the first time it is given).
    func noteOpened(_ name: String, flags: UInt32, dbi: MDB_dbi) {
        pthread_mutex_lock(databasesLock)
        defer { pthread_mutex_unlock(databasesLock) }
        guard !openedDatabases.contains(where: { $0.dbi == dbi }) else { return }
        openedDatabases.append((name, flags & ~UInt32(MDB_CREATE), dbi))
    }

    // MARK: Compaction

    /// Rewrites the data file with its live pages only, and goes on with it: what an erasure needs, since LMDB
    /// leaves the bytes of freed pages (and of space freed inside pages) in the file until they are reused.
    ///
    /// Waits for every transaction of this process to end and holds new ones back meanwhile (the map lock,
    /// held exclusively). Writes a compacting copy (`mdb_env_copy2` with `MDB_CP_COMPACT`, which writes only
    /// the pages the trees reach, each with only its used bytes) into `<path>/.compacting/`, syncs it,
    /// renames it over `data.mdb`, syncs the directory, removes `lock.mdb` (the copy starts its own
    /// transaction numbers; a process still holding the old file keeps the old lock file with it), then
    /// opens the new file and its named databases again in the order they were first opened, so that their
    /// handles are unchanged. A crash at any point leaves either the old file or the whole new one.
    ///
    /// - Throws: `LMDBError` when the copy cannot be written (the old file is kept and still open), or — only
    ///   when the new file cannot be opened again, which leaves this environment unusable — that failure.
    public func compact() throws(LMDBError) {
        pthread_rwlock_wrlock(mapLock)
        defer { pthread_rwlock_unlock(mapLock) }
        let scratch = path + "/.compacting"
        let data = path + "/data.mdb"
        unlink(scratch + "/data.mdb")
        rmdir(scratch)
        guard mkdir(scratch, 0o700) == 0 else {
            throw LMDBError(code: LMDBError.Code(rawValue: errno), function: "mkdir(.compacting)")
        }
        do {
            try LMDBError.check(mdb_env_copy2(handle, scratch, UInt32(MDB_CP_COMPACT)), "mdb_env_copy2")
            try Self.sync(scratch + "/data.mdb")
            guard rename(scratch + "/data.mdb", data) == 0 else {
                throw LMDBError(code: LMDBError.Code(rawValue: errno), function: "rename(data.mdb)")
            }
        } catch let error as LMDBError {
            unlink(scratch + "/data.mdb")
            rmdir(scratch)
            throw error
        } catch {
            preconditionFailure("only LMDBError is thrown above")
        }
        rmdir(scratch)
        try Self.sync(path)
        let size = mapSize
        mdb_env_close(handle)
        unlink(path + "/lock.mdb")
        handle = try Self.openHandle(path: path, options: options, mapSize: size)
        pthread_mutex_lock(databasesLock)
        let databases = openedDatabases
        pthread_mutex_unlock(databasesLock)
        var txn: OpaquePointer?
        try LMDBError.check(
            mdb_txn_begin(handle, nil, options.readOnly ? UInt32(MDB_RDONLY) : 0, &txn), "mdb_txn_begin")
        for database in databases {
            var dbi: MDB_dbi = 0
            let code = mdb_dbi_open(txn, database.name, database.flags, &dbi)
            guard code == 0, dbi == database.dbi else {
                mdb_txn_abort(txn)
                if code != 0 { try LMDBError.check(code, "mdb_dbi_open(\(database.name))") }
                throw LMDBError(code: .invalid, function: "mdb_dbi_open(\(database.name)) after compaction")
            }
        }
        try LMDBError.check(mdb_txn_commit(txn), "mdb_txn_commit")
    }

    /// `fsync`s the file or directory at `path`.
    private static func sync(_ path: String) throws(LMDBError) {
        let descriptor = open(path, O_RDONLY)
        guard descriptor >= 0 else { throw LMDBError(code: LMDBError.Code(rawValue: errno), function: "open(\(path))") }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else {
            throw LMDBError(code: LMDBError.Code(rawValue: errno), function: "fsync(\(path))")
        }
    }

    // MARK: Transactions

    /// Runs `body` in a read-only transaction that sees one consistent snapshot.
    ///
    /// Values lent by the transaction are valid only inside `body`: copy or decode them there.
    public func read<R>(_ body: (LMDBTransaction) throws -> R) throws -> R {
        try run(readOnly: true, body)
    }

    /// Runs `body` in a write transaction that commits (durably, unless `noSync`) when `body` returns
    /// and aborts when it throws — or when any LMDB call inside it failed, even one whose error `body`
    /// caught: a transaction in which a call failed never commits (see ``LMDBTransaction/failure``).
    ///
    /// If the map is full (whether `body` rethrew `MDB_MAP_FULL` or turned it into another error) the
    /// transaction is aborted, the map doubled, and `body` run again: `body` must have no effects outside
    /// the transaction.
    ///
    /// - Important: Never call it while this thread holds a read transaction of the same environment: map
    ///   growth waits for every transaction of the process to end.
    /// - Throws: what `body` throws, or `LMDBError` (`.mapFull` once `maximumMapSize` is reached,
    ///   `.noSpace` when the disk is full, the first failed call's error when `body` swallowed it).
    public func write<R>(_ body: (LMDBTransaction) throws -> R) throws -> R {
        while true {
            var failure: LMDBError?
            do {
                return try run(readOnly: false, body) { failure = $0.failure }
            } catch {
                guard failure?.code == .mapFull || (error as? LMDBError)?.code == .mapFull else { throw error }
                try growMap()
            }
        }
    }

    /// Runs `body` in a transaction under the shared map lock; commits on return (which, for a read
    /// transaction, keeps database handles opened in it valid) and aborts on throw. `aborted` sees the
    /// transaction before it is aborted.
    private func run<R>(
        readOnly: Bool, _ body: (LMDBTransaction) throws -> R, aborted: (LMDBTransaction) -> Void = { _ in }
    ) throws -> R {
        pthread_rwlock_rdlock(mapLock)
        defer { pthread_rwlock_unlock(mapLock) }
        let txn = try LMDBTransaction(environment: self, readOnly: readOnly)
        do {
            let result = try body(txn)
            try txn.commit()
            return result
        } catch {
            aborted(txn)
            txn.abort()
            throw error
        }
    }

    /// The number of the write transaction being begun (from 1); called with LMDB's writer mutex held.
    func nextWriteTransactionNumber() -> Int {
        writeTransactions += 1
        return writeTransactions
    }

    /// Doubles the map size (up to `maximumMapSize`), waiting for running transactions of this process.
    public func growMap() throws(LMDBError) {
        pthread_rwlock_wrlock(mapLock)
        defer { pthread_rwlock_unlock(mapLock) }
        let current = mapSize
        guard current < options.maximumMapSize else { throw LMDBError(code: .mapFull, function: "mdb_env_set_mapsize") }
        try LMDBError.check(
            mdb_env_set_mapsize(handle, min(current * 2, options.maximumMapSize)), "mdb_env_set_mapsize")
    }

    /// Adopts a map size grown by another process (after `MDB_MAP_RESIZED`).
    func adoptMapSize() throws(LMDBError) {
        pthread_rwlock_unlock(mapLock)
        pthread_rwlock_wrlock(mapLock)
        defer {
            pthread_rwlock_unlock(mapLock)
            pthread_rwlock_rdlock(mapLock)
        }
        try LMDBError.check(mdb_env_set_mapsize(handle, 0), "mdb_env_set_mapsize")
    }

    // MARK: Information and maintenance

    /// The current size of the memory map in bytes.
    public var mapSize: Int {
        var info = MDB_envinfo()
        mdb_env_info(handle, &info)
        return info.me_mapsize
    }

    /// Bytes of the data file in use (last used page × page size).
    public var usedBytes: Int {
        var info = MDB_envinfo()
        mdb_env_info(handle, &info)
        var stat = MDB_stat()
        mdb_env_stat(handle, &stat)
        return (info.me_last_pgno + 1) * Int(stat.ms_psize)
    }

    /// Writes a consistent copy of the environment into the existing empty directory `path`,
    /// compacting free pages. Safe while other transactions run.
    public func copy(to path: String) throws(LMDBError) {
        try LMDBError.check(mdb_env_copy2(handle, path, UInt32(MDB_CP_COMPACT)), "mdb_env_copy2")
    }
}
