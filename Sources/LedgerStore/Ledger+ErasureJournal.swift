import LedgerCore

/// The erasures of `erasures.jsonl` (``ErasureJournal``) that this copy of the ledger does not hold: a file
/// restored from a backup older than an erasure still names the device in its `registered` event (the same
/// event: its hash is the journal's). A writer applies them again when it opens the ledger; a reader must not
/// show what they name (``pendingJournaledErasures``).
extension Ledger {
    /// How many erasures of the journal beside this ledger are not applied to it: 0 unless the file was
    /// restored from a copy older than an erasure and no writer has opened it since. Reads the journal and
    /// one snapshot; works read-only.
    ///
    /// - Throws: `StoreError` (storage; `.corrupt` for a journal line that does not read).
    public func pendingJournaledErasures() throws -> Int {
        try journaledErasuresNotHeld().count
    }

    /// One `erase` operation for each device the journal names whose `registered` event here still holds its
    /// token, with the journal's pseudonym (the same one again) and reason.
    func journaledErasuresNotHeld() throws -> [LedgerOperation] {
        // An erasure applied again is journaled again: the first line of each device is its erasure.
        var seen = Set<UInt64>()
        let entries = try ErasureJournal.read(directory: directory).filter { seen.insert($0.registeredSeq).inserted }
        guard !entries.isEmpty else { return [] }
        return try read { snapshot in
            try entries.compactMap { entry in
                guard entry.registeredSeq > 0,
                    let hash = try snapshot.hash(at: entry.registeredSeq), Hex.encode(hash) == entry.registeredHash,
                    let event = try snapshot.event(at: entry.registeredSeq),
                    case .registered(let token, _, _) = event.body, !Erasure.isPseudonym(token),
                    let pseudonym = try? RegistrationToken(entry.pseudonym), Erasure.isPseudonym(pseudonym)
                else { return nil }
                return .erase(token, reason: "applied again after a restore: " + entry.reason, pseudonym: pseudonym)
            }
        }
    }
}
