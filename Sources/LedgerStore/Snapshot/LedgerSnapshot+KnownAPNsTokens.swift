import LMDBKit
import LedgerCore

extension LedgerSnapshot {
    /// Whether a device of the project holds one of `candidates` as its APNs token now, or held it before (an
    /// erased device's tokens are forgotten, so they are not found): what an erasure's reason is checked
    /// against (``ReasonIdentifiers``).
    ///
    /// No index maps an APNs token to its device, so this reads every token held and every one in the history:
    /// an erasure asks only when its reason holds a run of base64 or hex that decodes to 16 to 200 bytes.
    ///
    /// - Important: The candidates are secrets: never log them.
    public func holdsAnyAPNsToken(among candidates: Set<[UInt8]>) throws -> Bool {
        guard !candidates.isEmpty else { return false }
        for database in [schema.apnsTokens, schema.apnsTokenHistory] {
            var found = false
            try txn.withCursor(database) { cursor in
                try cursor.forEach { entry in
                    // `seq ‖ sandbox ‖ token` in both databases (``APNsTokenRecord``).
                    guard entry.value.count > 9 else { return true }
                    found = candidates.contains(Array(entry.value[9...]))
                    return !found
                }
            }
            if found { return true }
        }
        // ActivityKit tokens too, now and before: `seq ‖ token` in current and history entries
        // (``LiveActivityTokenRecord``).
        var found = false
        try txn.withCursor(schema.liveActivityTokens) { cursor in
            try cursor.forEach { entry in
                guard entry.key.first != LiveActivityTokenRecord.scopeKind, entry.value.count > 8 else { return true }
                found = candidates.contains(Array(entry.value[8...]))
                return !found
            }
        }
        return found
    }
}
