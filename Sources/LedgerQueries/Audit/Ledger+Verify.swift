import LedgerStore
import Foundation
import LMDBKit
import LedgerCore

extension Ledger {
    /// Checks one snapshot of the ledger: the seq is gapless, every event decodes, every hash matches
    /// `SHA-256(prevHash ‖ event)`, times never decrease, the head matches the last event, and every
    /// projection equals what folding the log gives (rebuilt into a scratch environment and compared
    /// entry by entry).
    ///
    /// Read-only; safe while a server writes (the snapshot does not move).
    ///
    /// - Parameters:
    ///   - scratchDirectory: where the comparison ledger is built and then removed.
    ///   - problemLimit: stop listing problems after this many.
    ///   - checkAudiences: also recompute every recorded audience from the temporal index and compare it
    ///     with its `audience` event (what `replay` does for one message, for all of them; O(sends × audience)).
    public func verify(
        scratchDirectory: String = NSTemporaryDirectory(), problemLimit: Int = 50, checkAudiences: Bool = false
    ) throws -> VerificationReport {
        try environment.read { txn in
            let snapshot = LedgerSnapshot(txn: txn, schema: schema)
            var report = VerificationReport(events: 0, problems: [])
            let head = try snapshot.head()
            report.events = head.seq
            let chainIntact = try checkChain(txn: txn, head: head, report: &report, limit: problemLimit)
            if try snapshot.rebuildingThrough() != nil {
                report.problems.append("projections are incomplete: a rebuild is running or was interrupted")
            } else if chainIntact {
                try compareProjections(
                    txn: txn, headSeq: head.seq, scratch: scratchDirectory, report: &report,
                    limit: problemLimit)
            } else {
                report.problems.append("projections were not compared because the log itself is damaged")
            }
            if report.isSound {
                try checkRecordedAudiences(snapshot, recompute: checkAudiences, report: &report, limit: problemLimit)
            }
            return report
        }
    }

    /// Counts sends without an audience and, with `recompute`, replays every recorded one.
    private func checkRecordedAudiences(
        _ snapshot: LedgerSnapshot, recompute: Bool, report: inout VerificationReport, limit: Int
    ) throws {
        report.sendsWithoutAudience = try snapshot.sendsWithoutAudience().count
        guard recompute else { return }
        var recorded: [UInt64] = []
        try snapshot.txn.withCursor(schema.messages) { cursor in
            try cursor.forEach { entry in
                if MessageState(entry.value).audienceSeq != 0 { recorded.append(entry.key.loadBigEndianUInt64()) }
                return true
            }
        }
        for messageID in recorded {
            report.audiencesChecked += 1
            guard let replay = try MessageReplay.replay(messageID, in: snapshot) else { continue }
            if !replay.digestRecomputable { report.audiencesCountOnly += 1 }
            guard !replay.matchesRecord else { continue }
            if report.problems.count < limit {
                report.problems.append(
                    "message \(messageID) (sent at seq \(replay.seq)): its recorded audience "
                        + "(\(replay.recorded?.record.recipientCount ?? 0) recipients) differs from the reconstruction "
                        + "(\(replay.recipientCount) recipients); see `ledger replay --message \(messageID)`")
            }
        }
    }

    /// Walks the log once; returns whether every event decoded and chained.
    private func checkChain(txn: LMDBTransaction, head: LedgerHead, report: inout VerificationReport, limit: Int)
        throws -> Bool
    {
        var expected: UInt64 = 1
        var previousHash = HashChain.genesis
        var previousTime = Int64.min
        var erasures = ErasureAccount()
        var forgotten = ForgottenSeals()
        var intact = true
        func problem(_ text: String) {
            intact = false
            if report.problems.count < limit { report.problems.append(text) }
        }
        try txn.withCursor(schema.log) { cursor in
            try cursor.forEach { entry in
                let seq = entry.key.count == 8 ? entry.key.loadBigEndianUInt64() : 0
                if seq != expected {
                    problem("seq \(expected): missing; the next stored key is \(seq) (the seq must be gapless)")
                    expected = seq
                }
                defer { expected += 1 }
                guard entry.value.count > HashChain.hashSize else {
                    problem("seq \(seq): record of \(entry.value.count) bytes is too short")
                    return true
                }
                let parts = try HashChain.split(record: entry.value)
                let redacted = EventCodec.isRedacted(parts.encodedEvent)
                let previous = previousHash
                previousHash = Array(parts.hash)
                do {
                    let event = try EventCodec.decode(parts.encodedEvent)
                    // A sealed record's hash recomputes from its hashed form, forgotten values or not. A record an
                    // erasure rewrote before the ledger sealed (version 2) keeps the original's hash, which its
                    // bytes no longer give: the next record's hash (chained from it), the Merkle tree over the
                    // hashes and the `erased` event that accounts for it (``ErasureAccount``) vouch for it — and a
                    // holder of the token can rebuild the original and find it by that hash (`linkable`).
                    if let computed = try HashChain.recomputedHash(
                        previous: previous, encodedEvent: parts.encodedEvent, decoded: event),
                        !computed.elementsEqual(parts.hash)
                    {
                        problem(
                            "seq \(seq): hash mismatch: stored \(parts.hash.hexString), computed \(computed.hexString)")
                    }
                    if redacted { report.linkable += 1 }
                    forgotten.note(event)
                    if redacted || event.seals?.contains(where: { $0.forgotten == Seal.erasure }) == true {
                        erasures.noteRedacted(event)
                    } else if event.seals?.last?.forgotten.hasPrefix(Seal.erasure + "; ") == true {
                        erasures.noteEmptied(at: seq)
                    } else if case .erased(let erasure) = event.body {
                        erasures.noteErasure(erasure, at: seq)
                    }
                    if event.seq != seq { problem("seq \(seq): the event inside says seq \(event.seq)") }
                    if event.time.microseconds < previousTime { problem("seq \(seq): time goes backwards") }
                    previousTime = event.time.microseconds
                } catch {
                    problem("seq \(seq): event does not decode: \(error)")
                }
                return true
            }
        }
        if expected - 1 != head.seq {
            problem(
                "head says seq \(head.seq) but the log ends at seq \(expected - 1): the ledger is refused for writing."
                    + " Restore the last backup (`ledger backup`, docs/operations.md); "
                    + (expected - 1 > head.seq
                        ? "events after seq \(head.seq) were written by a request that was never acknowledged"
                        : "events after seq \(expected - 1) are lost"))
        }
        if head.seq > 0 && head.hash != previousHash { problem("head hash does not match the hash of seq \(head.seq)") }
        for text in erasures.problems() { problem(text) }
        for text in forgotten.finish() { problem(text) }
        report.erasures = erasures.erasures
        report.redactedEvents = erasures.redactedEvents
        return intact
    }

    /// Folds the snapshot's log into a scratch environment and compares every projection entry by entry.
    private func compareProjections(
        txn: LMDBTransaction, headSeq: UInt64, scratch: String, report: inout VerificationReport, limit: Int
    ) throws {
        let directory = (scratch as NSString).appendingPathComponent("ledger-verify-\(UUID().uuidString)")
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        var options = LMDBEnvironment.Options()
        options.noSync = true
        // Starts as small as the ledger's own map was configured and grows like it (a different environment:
        // growing it never waits for the read transaction this runs in).
        options.mapSize = self.options.environment.mapSize
        let reference: LMDBEnvironment
        do {
            reference = try LMDBEnvironment(path: directory, options: options)
        } catch {
            try? FileManager.default.removeItem(atPath: directory)
            throw error
        }
        // Unlinked as soon as it is open: LMDB works on the files it opened and never opens them by name again,
        // so the space goes back to the file system when this environment closes — or when the process ends,
        // however it ends. So an interrupted verify (Ctrl-C, a kill, a crash) never leaves a comparison ledger
        // as large as the projections in the temporary directory.
        try? FileManager.default.removeItem(atPath: directory)
        let referenceSchema = try reference.write { try LedgerSchema($0) }
        let projection = try ProjectionBuilder.fold(from: LedgerSnapshot(txn: txn, schema: schema), through: headSeq)
        try projection.write(to: reference, schema: referenceSchema)
        try splitInstanceSide(of: reference, schema: referenceSchema, like: txn)
        try reference.read { referenceTxn in
            for (liveDatabase, referenceDatabase) in zip(schema.projections, referenceSchema.projections) {
                try compare(
                    liveDatabase, in: txn, with: referenceDatabase, in: referenceTxn, report: &report,
                    limit: limit)
            }
        }
    }

    /// The live writer keeps new memberships' instance side in `recentMemberships` until it moves them
    /// (``RecentMemberships``); a rebuild writes every one to `instanceTopics`. Moves the reference's entries
    /// that the live ledger holds in `recentMemberships` there too, so the two compare entry by entry: a
    /// live entry the rebuild lacks stays unmatched and is reported.
    private func splitInstanceSide(
        of reference: LMDBEnvironment, schema referenceSchema: LedgerSchema, like txn: LMDBTransaction
    ) throws {
        var recent: [RecentMemberships.Entry] = []
        try txn.withCursor(schema.recentMemberships) { cursor in
            try cursor.forEach { item in
                // A value of the wrong size stays where it is and is reported by the comparison.
                guard item.value.count == RecentMemberships.Entry.size else { return true }
                recent.append(RecentMemberships.Entry(item.value))
                return true
            }
        }
        guard !recent.isEmpty else { return }
        try reference.write { referenceTxn in
            for entry in recent
            where try referenceTxn.delete(
                referenceSchema.instanceTopics, key: entry.instance,
                value: membershipValue(entry.topic, since: entry.since))
            {
                // Under the partition the entry's instance belongs to: one the live ledger keeps elsewhere is reported.
                try referenceTxn.put(
                    referenceSchema.recentMemberships, key: RecentMemberships.partition(of: entry.instance),
                    value: entry.encoded)
            }
        }
    }

    private func compare(
        _ liveDatabase: LMDBDatabase, in liveTxn: LMDBTransaction, with referenceDatabase: LMDBDatabase,
        in referenceTxn: LMDBTransaction, report: inout VerificationReport, limit: Int
    ) throws {
        var differences = 0
        func difference(_ text: String) {
            differences += 1
            if report.problems.count < limit {
                report.problems.append("projection \(liveDatabase.name) differs from a rebuild: \(text)")
            }
        }
        try liveTxn.withCursor(liveDatabase) { liveCursor in
            try referenceTxn.withCursor(referenceDatabase) { referenceCursor in
                var liveEntry = try liveCursor.first()
                var referenceEntry = try referenceCursor.first()
                while differences < 10, liveEntry != nil || referenceEntry != nil {
                    switch (liveEntry, referenceEntry) {
                    case (let live?, let reference?):
                        if live.key.elementsEqual(reference.key) && live.value.elementsEqual(reference.value) {
                            liveEntry = try liveCursor.next()
                            referenceEntry = try referenceCursor.next()
                        } else if live.key.elementsEqual(reference.key) {
                            difference(
                                "key \(live.key.hexString) holds \(live.value.hexString), expected \(reference.value.hexString)"
                            )
                            liveEntry = try liveCursor.next()
                            referenceEntry = try referenceCursor.next()
                        } else if live.key.lexicographicallyPrecedes(reference.key) {
                            difference("unexpected key \(live.key.hexString)")
                            liveEntry = try liveCursor.next()
                        } else {
                            difference("missing key \(reference.key.hexString)")
                            referenceEntry = try referenceCursor.next()
                        }
                    case (let live?, nil):
                        difference("unexpected key \(live.key.hexString)")
                        liveEntry = try liveCursor.next()
                    case (nil, let reference?):
                        difference("missing key \(reference.key.hexString)")
                        referenceEntry = try referenceCursor.next()
                    case (nil, nil):
                        break
                    }
                }
            }
        }
    }
}
