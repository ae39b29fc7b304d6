import Foundation
import LMDBKit
import LedgerCore

/// A project's ledger files, opened and checked: the directory, the writer lock, the LMDB environment and its
/// databases at the current layout. What ``Ledger`` is built on; it starts no threads.
struct LedgerStorage {
    let directory: String
    let writerLock: WriterLock?
    let environment: LMDBEnvironment
    let schema: LedgerSchema

    /// Opens (for writers: creates and upgrades) the ledger of `project` under `dataDirectory`.
    ///
    /// - Throws: `StoreError` `.locked`, `.notFound` (read-only and absent), `.incompatible` (another layout
    ///   or project), `.corrupt` (for writers: the head and the log disagree), `.unavailable` (I/O).
    static func open(dataDirectory: String, project: ProjectID, options: Ledger.Options) throws -> LedgerStorage {
        let directory = (dataDirectory as NSString).appendingPathComponent(project.rawValue)
        let readOnly = options.mode == .readOnly
        if readOnly {
            guard FileManager.default.fileExists(atPath: directory + "/data.mdb") else {
                throw StoreError(.notFound, "no ledger for project \(project) in \(dataDirectory)")
            }
        } else {
            do {
                try FileManager.default.createDirectory(
                    atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw StoreError(.unavailable, "cannot create \(directory): \(error.localizedDescription)")
            }
        }
        let writerLock = readOnly ? nil : try WriterLock(directory: directory)
        var environmentOptions = options.environment
        environmentOptions.readOnly = readOnly
        let environment: LMDBEnvironment
        do {
            environment = try LMDBEnvironment(path: directory, options: environmentOptions)
        } catch {
            throw StoreError(.unavailable, "cannot open the ledger in \(directory): \(error)")
        }
        try checkNotTruncated(environment, directory: directory, project: project)
        let schema = try readOnly ? openSchema(environment, directory) : createOrUpgrade(environment, project)
        try checkIdentity(environment, schema, project: project, directory: directory)
        let storage = LedgerStorage(
            directory: directory, writerLock: writerLock, environment: environment, schema: schema)
        if !readOnly { try storage.checkHeadMatchesLog(project: project) }
        return storage
    }

    /// Refuses a data file shorter than the pages its last commit uses (a truncated copy or a damaged disk):
    /// LMDB maps the file, and touching a page past its end is SIGBUS — a crash, not an error.
    private static func checkNotTruncated(_ environment: LMDBEnvironment, directory: String, project: ProjectID)
        throws
    {
        let path = directory + "/data.mdb"
        let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.intValue ?? 0
        guard size >= environment.usedBytes else {
            throw StoreError(
                .corrupt,
                "the ledger of project \(project) is damaged: its data file holds \(size) bytes but its last commit"
                    + " uses \(environment.usedBytes) (truncated?); restore the last backup (docs/operations.md)")
        }
    }

    private static func openSchema(_ environment: LMDBEnvironment, _ directory: String) throws -> LedgerSchema {
        do {
            return try environment.read { try LedgerSchema($0) }
        } catch LMDBError.Code.notFound {
            throw StoreError(
                .incompatible,
                "the ledger in \(directory) has an older store layout; open it once with a writer (`ledger serve`"
                    + " or `ledger rebuild`) to upgrade it")
        }
    }

    private static func createOrUpgrade(_ environment: LMDBEnvironment, _ project: ProjectID) throws -> LedgerSchema {
        try environment.write { txn in
            let schema = try LedgerSchema(txn)
            if try !txn.contains(schema.meta, key: MetaKey.layoutVersion) {
                try txn.put(schema.meta, key: MetaKey.layoutVersion, value: LedgerSchema.layoutVersion)
                try txn.put(schema.meta, key: MetaKey.project, value: project.rawValue)
            }
            try upgradeLayout(txn, schema)
            // Not a projection, and not in ``LedgerSchema``: made here so that readers can open it (a read
            // transaction cannot open a database that does not exist without failing whole).
            _ = try txn.openDatabase(Ledger.activityDatabase, flags: [.create])
            return schema
        }
    }

    private static func checkIdentity(
        _ environment: LMDBEnvironment, _ schema: LedgerSchema, project: ProjectID, directory: String
    ) throws {
        try environment.read { txn in
            let version = try txn.withValue(in: schema.meta, forKey: MetaKey.layoutVersion) {
                $0?.loadBigEndianUInt32()
            }
            guard version == LedgerSchema.layoutVersion else {
                throw StoreError(
                    .incompatible,
                    "the ledger in \(directory) has store layout \(version.map(String.init) ?? "none"); this build reads"
                        + " layout \(LedgerSchema.layoutVersion)")
            }
            let storedProject = try txn.value(in: schema.meta, forKey: MetaKey.project).map {
                String(decoding: $0, as: UTF8.self)
            }
            guard storedProject == project.rawValue else {
                throw StoreError(
                    .incompatible,
                    "the ledger in \(directory) belongs to project \(storedProject ?? "?"), not \(project)")
            }
        }
    }

    /// Refuses to write onto a log whose head does not name its last event (seq and hash): appending there
    /// would chain onto the wrong event, or fail on every request.
    func checkHeadMatchesLog(project: ProjectID) throws {
        try environment.read { txn in
            let snapshot = LedgerSnapshot(txn: txn, schema: schema)
            let head = try snapshot.head()
            let last = try txn.withCursor(schema.log) { cursor -> (seq: UInt64, hash: [UInt8])? in
                guard let entry = try cursor.last() else { return nil }
                guard entry.key.count == 8, entry.value.count >= HashChain.hashSize else {
                    return (UInt64.max, [])
                }
                return (entry.key.loadBigEndianUInt64(), Array(entry.value.prefix(HashChain.hashSize)))
            }
            let matches =
                if let last { last.seq == head.seq && last.hash == head.hash } else { head.seq == 0 }
            guard matches else {
                throw StoreError(
                    .corrupt,
                    "the ledger of project \(project) is damaged: its head (seq \(head.seq)) does not match the last"
                        + " event of its log (seq \(last.map { String($0.seq) } ?? "none")); it is refused for"
                        + " writing. Run `ledger verify --project \(project)` for the report and restore the last"
                        + " backup (docs/operations.md)")
            }
        }
    }

    /// Layout 1 → 2 fills `sends` from `messages` (no `acknowledged` event can predate layout 2).
    /// Layout 2 → 3 stores names longer than LMDB's key limit under their hash (``NameKey``); no layout-2
    /// ledger can hold such a name (its writes failed), so the step only records the new version — which
    /// keeps older builds, which would not find hashed keys, from opening the ledger.
    /// Layout 3 → 6 builds the Merkle tree over the log (``MerkleStore``); 4 → 6 builds it again under keys
    /// that grow with the log, 5 → 6 again from subtrees of 256 leaves. 6 → 7 adds an empty
    /// `recentInstanceTopics`; 7 → 8 moves its entries into `instanceTopics` and replaces it with
    /// `recentMemberships` (``RecentMemberships``). 8 → 9 adds the (empty) APNs token databases, which
    /// ``LedgerSchema`` creates in this transaction: no layout-8 ledger holds an APNs token event. 10 → 11 changes
    /// no database: the writer seals the events it appends from then on (docs/event-format.md, "Sealed fields").
    /// 11 → 12 adds the (empty) `liveActivityChannels`, and 12 → 13 the (empty) `liveActivityTokens`, which
    /// ``LedgerSchema`` creates in this transaction: no layout-11 ledger holds a broadcast channel, and no layout-12
    /// one a follower's or push-to-start token (nor a send recorded on a channel: its sends replay as they went out).
    private static func upgradeLayout(_ txn: LMDBTransaction, _ schema: LedgerSchema) throws {
        var version = try txn.withValue(in: schema.meta, forKey: MetaKey.layoutVersion) {
            $0?.loadBigEndianUInt32()
        }
        if version == 1 {
            var sends: [(seq: UInt64, messageID: UInt64)] = []
            try txn.withCursor(schema.messages) { cursor in
                try cursor.forEach { entry in
                    let state = MessageState(entry.value)
                    sends.append((state.sendSeq, entry.key.loadBigEndianUInt64()))
                    return true
                }
            }
            for send in sends.sorted(by: { $0.seq < $1.seq }) {
                try txn.put(schema.sends, key: send.seq, value: send.messageID, flags: .append)
            }
            version = 2
        }
        if version == 2 { version = 3 }
        if version == 3 || version == 4 || version == 5 {
            // The Merkle tree over the log so far, from the chain hashes alone (layout 4 kept it under
            // level-major keys, layout 5 from subtrees of 16 leaves: it is made again as layout 6 keeps it).
            try txn.clear(schema.merkle)
            var builder = MerkleBuilder()
            try txn.withCursor(schema.log) { cursor in
                try cursor.forEach { entry in
                    builder.add(chainHash: try HashChain.split(record: entry.value).hash)
                    return true
                }
            }
            try builder.forEachStored { key, hash in try txn.put(schema.merkle, key: key, value: hash) }
            version = 6
        }
        // 6 → 7 added `recentInstanceTopics`; 7 → 8 moves what waits there into `instanceTopics` and drops it
        // (`recentMemberships`, its replacement, is created empty by `LedgerSchema` in this transaction).
        if let old = version, old < 8 {
            let recent = try txn.openDatabase(
                "recentInstanceTopics", flags: [.create, .duplicateSort, .duplicateFixed])
            try txn.withCursor(recent) { cursor in
                try cursor.forEach { entry in
                    guard entry.key.count == 4, entry.value.count == StoredMembership.size else {
                        throw StoreError(.corrupt, "recentInstanceTopics holds an entry of the wrong size")
                    }
                    guard
                        try txn.put(schema.instanceTopics, key: entry.key, value: entry.value, flags: .noDuplicateData)
                    else {
                        throw StoreError(
                            .corrupt,
                            "instance \(entry.key.loadBigEndianUInt32()) holds a membership on both of its sides")
                    }
                    return true
                }
            }
            try txn.drop(recent)
        }
        if version != LedgerSchema.layoutVersion {
            try txn.put(schema.meta, key: MetaKey.layoutVersion, value: LedgerSchema.layoutVersion)
        }
    }
}
