internal import CLMDB

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// An error returned by LMDB, carrying the C result code and the function that failed.
///
/// Match a specific code with `catch LMDBError.Code.mapFull { … }`.
public struct LMDBError: Error, CustomStringConvertible, Sendable {
    /// An LMDB result code (`MDB_NOTFOUND`, `MDB_MAP_FULL`, or an `errno` value).
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let rawValue: Int32
        public init(rawValue: Int32) { self.rawValue = rawValue }

        public static let keyExists = Code(rawValue: MDB_KEYEXIST)
        public static let notFound = Code(rawValue: MDB_NOTFOUND)
        public static let corrupted = Code(rawValue: MDB_CORRUPTED)
        public static let panic = Code(rawValue: MDB_PANIC)
        public static let versionMismatch = Code(rawValue: MDB_VERSION_MISMATCH)
        public static let invalid = Code(rawValue: MDB_INVALID)
        public static let mapFull = Code(rawValue: MDB_MAP_FULL)
        public static let databasesFull = Code(rawValue: MDB_DBS_FULL)
        public static let readersFull = Code(rawValue: MDB_READERS_FULL)
        public static let transactionFull = Code(rawValue: MDB_TXN_FULL)
        public static let mapResized = Code(rawValue: MDB_MAP_RESIZED)
        public static let badValueSize = Code(rawValue: MDB_BAD_VALSIZE)
        public static let incompatible = Code(rawValue: MDB_INCOMPATIBLE)
        /// The disk is full (`ENOSPC`).
        public static let noSpace = Code(rawValue: ENOSPC)
        /// A low-level I/O error (`EIO`).
        public static let ioError = Code(rawValue: EIO)
        /// The file or directory does not exist (`ENOENT`).
        public static let noSuchFile = Code(rawValue: ENOENT)
        /// Permission denied (`EACCES`).
        public static let accessDenied = Code(rawValue: EACCES)
        /// The resource is busy or locked (`EBUSY`).
        public static let busy = Code(rawValue: EBUSY)

        public var description: String { String(cString: mdb_strerror(rawValue)) }
    }

    public let code: Code
    /// The LMDB function that returned the code, e.g. `mdb_put`.
    public let function: String

    public init(code: Code, function: String) {
        self.code = code
        self.function = function
    }

    public var description: String { "\(function): \(code) (\(code.rawValue))" }

    /// Throws an `LMDBError` unless `result` is `MDB_SUCCESS`. The function name is built only on failure.
    @inline(__always)
    static func check(_ result: Int32, _ function: @autoclosure () -> String) throws(LMDBError) {
        if result != MDB_SUCCESS { throw LMDBError(code: Code(rawValue: result), function: function()) }
    }
}

/// Lets `catch LMDBError.Code.mapFull` match an `LMDBError` with that code.
public func ~= (pattern: LMDBError.Code, error: any Error) -> Bool {
    (error as? LMDBError)?.code == pattern
}
