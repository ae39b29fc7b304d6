import LMDBKit
import LedgerCore

/// When each device was last heard from, for registration expiry: the `activity` database, instance u32 →
/// seconds since 1970 u64, written by the server at most once a sweep per device (never an event: a poll
/// would otherwise cost an event each).
///
/// It is not a projection of the log: `rebuild` leaves it alone and `verify` does not compare it, and a
/// ledger without it (older, imported) answers from the log — a device's last activity is then the time of
/// the registration it holds, which is the same rule a rebuild of a real projection would follow, since
/// polls and streams leave nothing in the log. Backups carry it with the rest of the file.
extension Ledger {
    static let activityDatabase = "activity"

    /// Records that `tokens` were active at `seconds` (those the ledger does not know are passed over), in a
    /// write transaction of its own. A later time never moves back.
    public func noteActivity(_ tokens: [RegistrationToken], at seconds: Int64) throws {
        guard !tokens.isEmpty, seconds > 0 else { return }
        try writeActivity { txn, activity in
            let snapshot = LedgerSnapshot(txn: txn, schema: schema)
            for case let instance? in try snapshot.instanceIDs(of: tokens) {
                try Self.note(instance, at: UInt64(seconds), in: activity, txn: txn)
            }
        }
    }

    /// Records each device's (device number's) activity as another replica saw it; times ≤ 0 are passed over.
    public func noteActivity(ofDevices devices: [(device: InstanceID, lastActive: Int64)]) throws {
        guard devices.contains(where: { $0.lastActive > 0 }) else { return }
        try writeActivity { txn, activity in
            for (device, seconds) in devices where seconds > 0 {
                try Self.note(device, at: UInt64(seconds), in: activity, txn: txn)
            }
        }
    }

    /// The last activity this copy knows of each of `devices` (device numbers), for those it knows any of.
    public func lastActivity(ofDevices devices: [InstanceID]) throws -> [(device: InstanceID, lastActive: Int64)] {
        try read { snapshot in
            // A writer creates it when it opens the ledger (``LedgerStorage``).
            let activity: LMDBDatabase? = try snapshot.txn.openDatabase(Self.activityDatabase)
            guard let activity else { return [] }
            return try devices.compactMap { device in
                try snapshot.txn.withValue(in: activity, forKey: device) { $0?.loadBigEndianUInt64() }.map {
                    (device, Int64(clamping: $0))
                }
            }
        }
    }

    private static func note(
        _ instance: InstanceID, at seconds: UInt64, in activity: LMDBDatabase, txn: LMDBTransaction
    )
        throws
    {
        let known = try txn.withValue(in: activity, forKey: instance) { $0?.loadBigEndianUInt64() } ?? 0
        if seconds > known { try txn.put(activity, key: instance, value: seconds) }
    }

    private func writeActivity(_ body: (LMDBTransaction, LMDBDatabase) throws -> Void) throws {
        guard options.mode == .readWrite else {
            throw StoreError(.invalidArgument, "the ledger of \(project) is open read-only")
        }
        do {
            try environment.write { txn in
                try body(txn, try txn.openDatabase(Self.activityDatabase, flags: [.create]))
            }
        } catch let error as StoreError {
            throw error
        } catch {
            throw Ledger.storageError(error, directory: directory)
        }
    }

    /// Registered devices silent since before `cutoff` (seconds since 1970): each one's token and last
    /// activity, the stalest first, at most `limit`. A device never heard from counts from the time of the
    /// registration it holds.
    public func silentRegistrations(before cutoff: Int64, limit: Int) throws -> [(
        token: RegistrationToken, device: InstanceID, lastActive: Int64
    )] {
        try read { snapshot in
            let txn = snapshot.txn
            // A writer creates it when it opens the ledger (``LedgerStorage``).
            let activity: LMDBDatabase? = try txn.openDatabase(Self.activityDatabase)
            var silent: [(instance: InstanceID, since: UInt64, lastActive: Int64)] = []
            try txn.withCursor(schema.universe) { cursor in
                try cursor.forEachValueChunk(of: universeKey) { chunk in
                    for offset in stride(from: 0, to: chunk.count, by: StoredMembership.size) {
                        let membership = StoredMembership(chunk, at: offset)
                        let noted = try activity.flatMap { database in
                            try txn.withValue(in: database, forKey: membership.id) { $0?.loadBigEndianUInt64() }
                        }
                        if let noted, Int64(clamping: noted) >= cutoff { continue }
                        silent.append((membership.id, membership.since, Int64(clamping: noted ?? 0)))
                    }
                    return true
                }
            }
            var result: [(token: RegistrationToken, device: InstanceID, lastActive: Int64)] = []
            for entry in silent {
                // Never heard from: the registration's own time.
                var lastActive = entry.lastActive
                if lastActive == 0, let event = try snapshot.event(at: entry.since) {
                    lastActive = event.time.microseconds / 1_000_000
                }
                guard lastActive < cutoff, let token = try snapshot.token(of: entry.instance) else { continue }
                result.append((token, entry.instance, lastActive))
            }
            return Array(result.sorted { $0.lastActive < $1.lastActive }.prefix(limit))
        }
    }
}
