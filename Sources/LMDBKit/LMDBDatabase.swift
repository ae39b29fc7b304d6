internal import CLMDB

/// A named database inside an ``LMDBEnvironment``; valid for the environment's lifetime.
public struct LMDBDatabase: Sendable, Hashable {
    let dbi: MDB_dbi
    /// The database's name in the environment.
    public let name: String
    /// Whether keys may hold several sorted values (`MDB_DUPSORT`).
    public let allowsDuplicates: Bool

    /// How to open a database.
    public struct Flags: OptionSet, Sendable {
        public let rawValue: UInt32
        public init(rawValue: UInt32) { self.rawValue = rawValue }
        /// Create the database if it does not exist (write transactions only).
        public static let create = Flags(rawValue: UInt32(MDB_CREATE))
        /// Keys may have several values, kept sorted by their bytes.
        public static let duplicateSort = Flags(rawValue: UInt32(MDB_DUPSORT))
        /// With `duplicateSort`: all values of a key have the same size (enables bulk dup reads).
        public static let duplicateFixed = Flags(rawValue: UInt32(MDB_DUPFIXED))
    }
}

/// Flags for ``LMDBTransaction/put(_:key:value:flags:)``.
public struct LMDBWriteFlags: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    /// Fail with `.keyExists` if the key is present.
    public static let noOverwrite = LMDBWriteFlags(rawValue: UInt32(MDB_NOOVERWRITE))
    /// In a duplicate-sorted database, fail with `.keyExists` if the key/value pair is present.
    public static let noDuplicateData = LMDBWriteFlags(rawValue: UInt32(MDB_NODUPDATA))
    /// The key is greater than every key in the database (fast bulk load); `.keyExists` otherwise.
    public static let append = LMDBWriteFlags(rawValue: UInt32(MDB_APPEND))
    /// Like `append`, for the values of one key in a duplicate-sorted database.
    public static let appendDuplicate = LMDBWriteFlags(rawValue: UInt32(MDB_APPENDDUP))
}
