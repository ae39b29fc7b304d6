import Foundation
import LMDBKit
import LedgerCore
import LedgerQueries
import LedgerTestSupport
import Synchronization
import Testing

@testable import LedgerStore

/// Erasure through `Ledger.append`: the identifiers leave every file, the facts and every proof stay.
@Suite("Erasure", .offThePool)
struct ErasureTests {
    private let erased = ErasureFixture.erased
    private let kept = ErasureFixture.kept
    private let apnsToken = ErasureFixture.apnsToken
    private func request(_ operations: [LedgerOperation], actor: String = "admin") -> WriteRequest {
        ErasureFixture.request(operations, actor: actor)
    }

    /// Two devices with history: the one to erase is ios with an APNs token, on two topics, sent to by token
    /// (its token also in the message's data) and by topic, acknowledged; the other shares a topic.
    private func history(_ ledger: Ledger) async throws {
        _ = try await ledger.append(
            request([
                .register(erased, platform: "ios", appID: "app"), .register(kept, platform: "android", appID: "app"),
            ]))
        _ = try await ledger.append(request([.setAPNsToken(erased, apnsToken)]))
        for topic in ["news", "sports"] {
            _ = try await ledger.append(request([.subscribe(erased, try TopicName(topic), via: .v1)]))
        }
        _ = try await ledger.append(request([.subscribe(kept, try TopicName("news"), via: .v1)]))
        let json = Array("{\"token\":\"\(erased.rawValue)\",\"data\":{\"who\":\"\(erased.rawValue)\"}}".utf8)
        _ = try await ledger.append(request([.send(.token(erased), precedence: .leftToRight, messageJSON: json)]))
        _ = try await ledger.append(
            request([.send(.topic(try TopicName("news")), precedence: .leftToRight, messageJSON: Array("{}".utf8))]))
        ledger.waitForAudiences()
        let head = try ledger.read { try $0.head().seq }
        _ = try await ledger.append(request([.acknowledge(erased, through: head)], actor: "device"))
    }

    @Test("after an erasure no file holds the token or the APNs token; facts, the chain and the tree stay")
    func erasure() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        try await history(ledger)
        let before = try ledger.read { try $0.head().seq }
        let oldRoot = try ledger.read { try $0.merkleTree(size: before).root() }
        #expect(!IdentifierSearch.files(under: directory.path, holding: Array(erased.rawValue.utf8)).isEmpty)

        let receipt = try await ledger.append(request([.erase(erased, reason: "GDPR Art. 17 request #7")]))
        #expect(receipt.outcomes[0].seq == before + 1)
        for identifier in [Array(erased.rawValue.utf8), apnsToken.bytes] {
            #expect(IdentifierSearch.files(under: directory.path, holding: identifier) == [])
        }
        #expect(!IdentifierSearch.files(under: directory.path, holding: Array(kept.rawValue.utf8)).isEmpty)

        // The erased event: who, why, the pseudonym, how many events it rewrote.
        let event = try #require(try ledger.readLog { try $0.event(at: before + 1) })
        guard case .erased(let erasure) = event.body else {
            Issue.record("the last event is \(event.kind), not erased")
            return
        }
        #expect(event.actor == "admin")
        #expect(erasure.reason == "GDPR Art. 17 request #7")
        #expect(erasure.registeredSeq == 1)
        #expect(erasure.pseudonym.rawValue.hasPrefix("erased-"))
        // registered, apnsTokenSet, 2 subscribed, the token send, the acknowledgement.
        #expect(erasure.redactedEvents == 6)

        // Every hash stays: the old tree is a prefix of the new one, its root unchanged.
        let (newRoot, proof, sameOldRoot) = try ledger.read { snapshot in
            let tree = try snapshot.merkleTree(size: before + 1)
            return (
                try tree.root(), try tree.consistencyProof(from: before), try snapshot.merkleTree(size: before).root()
            )
        }
        #expect(sameOldRoot == oldRoot)
        #expect(
            MerkleVerifier.verifyConsistency(
                proof: proof, oldSize: before, newSize: before + 1, oldRoot: oldRoot, newRoot: newRoot))

        // Verify is sound, and counts.
        let report = try ledger.verify(checkAudiences: true)
        #expect(report.problems == [])
        #expect(report.erasures == 1 && report.redactedEvents == 6)

        // The token names nothing: it is refused like any unknown token; sends skip the device.
        let refused = try await ledger.append(request([.subscribe(erased, try TopicName("weather"), via: .v1)]))
        #expect(refused.outcomes[0].rejection?.code == .notFound)
        // A pusher that took the device before the erasure cannot write its token back into the log.
        let progress = try await ledger.append(
            request(
                [
                    .recordPushProgress(
                        PushProgress(
                            sendSeq: 1, throughToken: erased, finished: false, expired: false, failures: [],
                            settledThrough: 0))
                ], actor: "apns"))
        #expect(progress.outcomes[0].rejection?.code == .notFound)
        let again = try await ledger.append(request([.erase(erased, reason: "twice")]))
        #expect(again.outcomes[0].rejection?.code == .notFound)
        let members = try ledger.read { snapshot in
            try snapshot.recipientTokens(snapshot.audience(of: .topic(try TopicName("news")), precedence: .leftToRight))
        }
        #expect(members == [kept])

        // The replays of the sends before it keep their counts, and name the device by its pseudonym.
        let replays = try ledger.read { snapshot in
            var sends: [UInt64] = []
            try snapshot.forEachEvent(from: 1, through: before) { event, _ in
                if case .sent(let sent) = event.body { sends.append(sent.messageID) }
                return true
            }
            return try sends.map { try #require(try MessageReplay.replay($0, in: snapshot)) }
        }
        #expect(replays.map(\.recipientCount) == [1, 2])
        #expect(replays.map(\.erasedRecipients) == [1, 1])
        #expect(replays.map(\.matchesRecord) == [true, true])
        #expect(replays[0].recipients == [erasure.pseudonym])
        // Their recorded digests re-prove: they are over device numbers, which the erasure kept (the device
        // registered first is device 1), and the naive fold of the rewritten log gives the same.
        #expect(replays.allSatisfy { $0.digestVersion == .devices && $0.digestRecomputable })
        #expect(replays.allSatisfy { $0.recipientDigest == $0.recorded?.record.recipientDigest })
        #expect(replays[0].devices == [1])
        let naive = try ledger.read { snapshot in
            try replays.map { try #require(try MessageReplay.replay($0.messageID, in: snapshot, naive: true)) }
        }
        #expect(naive.map(\.recipientDigest) == replays.map(\.recipientDigest))
        #expect(naive.map(\.devices) == replays.map(\.devices))

        ledger.close()
    }

    @Test(
        "a layout-9 ledger's version-1 audiences match after the upgrade; once a recipient is erased, by count alone, and verify counts them"
    )
    func legacyAudiences() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let news = try TopicName("news")
        var message: UInt64 = 0
        do {
            // What layout 9 wrote: an audience over tokens, with no digest version.
            let ledger = try openTestLedger(directory) { $0.recordsAudiences = false }
            defer { ledger.close() }
            _ = try await ledger.append(
                request([
                    .register(erased, platform: nil, appID: nil), .register(kept, platform: nil, appID: nil),
                    .subscribe(erased, news, via: .v1), .subscribe(kept, news, via: .v1),
                ]))
            let sent = try await ledger.append(
                request([.send(.topic(news), precedence: .leftToRight, messageJSON: Array("{}".utf8))]))
            guard case .sent(let sendSeq, let messageID) = sent.outcomes[0] else {
                Issue.record("not sent: \(sent.outcomes)")
                return
            }
            message = messageID
            let digest = RecipientDigest.digest(sortedTokens: [erased, kept].sorted())
            let recorded = try await ledger.append(
                request([
                    .recordAudience(
                        AudienceRecord(
                            messageID: messageID, sendSeq: sendSeq, recipientCount: 2, recipientDigest: digest,
                            digestVersion: .tokens))
                ]))
            #expect(recorded.outcomes[0].seq != nil)
        }
        try makeOlderLayout(9, in: directory)
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        func replay() throws -> MessageReplay {
            try #require(try ledger.read { try MessageReplay.replay(message, in: $0) })
        }
        let before = try replay()
        #expect(before.digestVersion == .tokens && before.digestRecomputable && before.matchesRecord)
        #expect(
            Hex.encode(before.recipientDigest)
                == sha256Hex([erased, kept].map { $0.rawValue + "\n" }.sorted().joined()))

        _ = try await ledger.append(request([.erase(erased, reason: "r")]))
        let after = try replay()
        #expect(after.erasedRecipients == 1 && !after.digestRecomputable)
        #expect(after.matchesRecord, "the count still matches")
        let report = try ledger.verify(checkAudiences: true)
        #expect(report.problems == [] && report.audiencesChecked == 1 && report.audiencesCountOnly == 1)
        // A send from now on is recorded over device numbers.
        _ = try await ledger.append(
            request([.send(.topic(news), precedence: .leftToRight, messageJSON: Array("{}".utf8))]))
        ledger.waitForAudiences()
        let last = try ledger.read { snapshot -> AudienceRecord? in
            let head = try snapshot.head().seq
            guard case .audience(let record) = try snapshot.event(at: head)?.body else { return nil }
            return record
        }
        #expect(
            last?.digestVersion == .devices && last?.recipientDigest == RecipientDigest.digest(ascendingDevices: [2]))
    }

    @Test(
        "a compaction that fails after an erasure is owed: the ledger says so, writes wait for it, and it is made once it can be"
    )
    func owedCompaction() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        try await history(ledger)
        // A file where the compacting copy's directory goes: the copy cannot be made.
        let blocker = ledger.directory + "/.compacting"
        #expect(FileManager.default.createFile(atPath: blocker, contents: Data("x".utf8)))
        await #expect(throws: StoreError.self) {
            _ = try await ledger.append(request([.erase(erased, reason: "r")]))
        }
        #expect(ledger.compactionProblem != nil)
        let head = try ledger.read { try $0.head().seq }
        #expect(try ledger.read { try $0.event(at: head)?.kind } == .erased, "the erasure stands")
        await #expect(throws: StoreError.self, "writes wait for the compaction") {
            _ = try await ledger.append(request([.subscribe(kept, try TopicName("weather"), via: .v1)]))
        }
        try FileManager.default.removeItem(atPath: blocker)
        _ = try await ledger.append(request([.subscribe(kept, try TopicName("weather"), via: .v1)]))
        #expect(ledger.compactionProblem == nil)
        #expect(IdentifierSearch.files(under: directory.path, holding: Array(erased.rawValue.utf8)) == [])
    }

    @Test(
        "a compaction owed when the ledger closes is owed when a writer opens it again, and made before anything else"
    )
    func owedAcrossRestart() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let erasedBytes = Array(erased.rawValue.utf8)
        var blocker = ""
        do {
            let ledger = try openTestLedger(directory)
            defer { ledger.close() }
            try await history(ledger)
            // A file where the compacting copy's directory goes: the copy cannot be made.
            blocker = ledger.directory + "/.compacting"
            #expect(FileManager.default.createFile(atPath: blocker, contents: Data("x".utf8)))
            await #expect(throws: StoreError.self) {
                _ = try await ledger.append(request([.erase(erased, reason: "r")]))
            }
        }
        do {
            // Reopened while the compaction still cannot be made: owed, writes refused, the freed pages unchanged.
            let ledger = try openTestLedger(directory)
            defer { ledger.close() }
            #expect(ledger.compactionProblem != nil)
            await #expect(throws: StoreError.self) {
                _ = try await ledger.append(request([.subscribe(kept, try TopicName("weather"), via: .v1)]))
            }
            #expect(!IdentifierSearch.files(under: directory.path, holding: erasedBytes).isEmpty)
        }
        try FileManager.default.removeItem(atPath: blocker)
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        // Compacted when it opened, before any write.
        #expect(ledger.compactionProblem == nil)
        #expect(IdentifierSearch.files(under: directory.path, holding: erasedBytes) == [])
        #expect(!FileManager.default.fileExists(atPath: ledger.directory + "/compaction-owed"))
        _ = try await ledger.append(request([.subscribe(kept, try TopicName("weather"), via: .v1)]))
    }

    @Test("a follower whose compaction fails after a replicated erasure owes it, and makes it after the next block")
    func followerOwedCompaction() async throws {
        let leaderDirectory = TemporaryDirectory()
        let followerDirectory = TemporaryDirectory()
        defer {
            leaderDirectory.remove()
            followerDirectory.remove()
        }
        let gate = KeepingGate()
        let leader = try openTestLedger(leaderDirectory) { $0.replication = gate }
        defer { leader.close() }
        let follower = try openTestLedger(followerDirectory) { $0.replication = KeepingGate() }
        defer { follower.close() }
        try await history(leader)
        _ = try await leader.append(request([.erase(erased, reason: "r")]))
        let blocker = follower.directory + "/.compacting"
        #expect(FileManager.default.createFile(atPath: blocker, contents: Data("x".utf8)))
        for block in gate.take() { _ = try follower.applyReplicated(block) }
        #expect(follower.compactionProblem != nil)
        try FileManager.default.removeItem(atPath: blocker)
        _ = try await leader.append(request([.subscribe(kept, try TopicName("weather"), via: .v1)]))
        for block in gate.take() { _ = try follower.applyReplicated(block) }
        #expect(follower.compactionProblem == nil)
        #expect(IdentifierSearch.files(under: followerDirectory.path, holding: Array(erased.rawValue.utf8)) == [])
        #expect(try follower.read { try $0.head() } == leader.read { try $0.head() })
    }

    @Test("after a restart and more writes the files are still free of it, and the ledger still verifies")
    func restart() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        do {
            let ledger = try openTestLedger(directory)
            defer { ledger.close() }
            try await history(ledger)
            _ = try await ledger.append(request([.erase(erased, reason: "r")]))
        }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        _ = try await ledger.append(request([.subscribe(kept, try TopicName("weather"), via: .v1)]))
        #expect(IdentifierSearch.files(under: directory.path, holding: Array(erased.rawValue.utf8)) == [])
        #expect(try ledger.verify().problems == [])
    }

    @Test("a backup older than an erasure, restored, has the erasure applied again when a writer opens it")
    func restoredBackup() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let backups = TemporaryDirectory()
        defer { backups.remove() }
        let pseudonym: RegistrationToken
        do {
            let ledger = try openTestLedger(directory)
            defer { ledger.close() }
            try await history(ledger)
            try ledger.backup(to: backups.path)
            let receipt = try await ledger.append(request([.erase(erased, reason: "ticket 9")]))
            let event = try #require(try ledger.read { try $0.event(at: receipt.outcomes[0].seq!) })
            guard case .erased(let erasure) = event.body else { throw StoreError(.corrupt, "no erased event") }
            pseudonym = erasure.pseudonym
            #expect(IdentifierSearch.files(under: backups.path, holding: Array(erased.rawValue.utf8)) != [])
        }
        // The operator restores the older copy: its data file over the ledger's, the journal left beside it.
        let ledgerDirectory = directory.path + "/" + ProjectID.default.rawValue
        #expect(FileManager.default.fileExists(atPath: ledgerDirectory + "/" + ErasureJournal.fileName))
        try FileManager.default.removeItem(atPath: ledgerDirectory + "/data.mdb")
        try FileManager.default.removeItem(atPath: ledgerDirectory + "/lock.mdb")
        try FileManager.default.copyItem(
            atPath: backups.path + "/" + ProjectID.default.rawValue + "/data.mdb", toPath: ledgerDirectory + "/data.mdb"
        )
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        #expect(IdentifierSearch.files(under: directory.path, holding: Array(erased.rawValue.utf8)) == [])
        #expect(IdentifierSearch.files(under: directory.path, holding: apnsToken.bytes) == [])
        let erasures = try ledger.read { try $0.erasures() }
        #expect(erasures.map(\.device) == [pseudonym])
        #expect(erasures.map(\.actor) == ["restore"])
        #expect(try ledger.verify().problems == [])
    }

    @Test(
        "an erasure's journal line is owed until written: a journal that cannot be written is visible and written before the next write; a torn line is written again at the next open; a torn line nothing owes, or a damaged line, stops the open"
    )
    func owedJournal() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledgerDirectory = directory.path + "/" + ProjectID.default.rawValue
        let journal = ledgerDirectory + "/" + ErasureJournal.fileName
        let journalURL = URL(fileURLWithPath: journal)
        let third = RegistrationToken(trusted: "cTHIRDDEVICE:APA91b-0123456789abcdefghijklmnopqrstuvwxyz")
        func owed(_ ledger: Ledger) throws -> UInt64? {
            try ledger.read { try ErasureJournal.owedFrom(txn: $0.txn, schema: $0.schema) }
        }
        func reasons() throws -> [String] { try ErasureJournal.read(directory: ledgerDirectory).map(\.reason) }
        var thirdSeq: UInt64 = 0
        do {
            let ledger = try openTestLedger(directory)
            defer { ledger.close() }
            try await history(ledger)
            _ = try await ledger.append(request([.erase(erased, reason: "ticket 9")]))
            #expect(try reasons() == ["ticket 9"])
            #expect(try owed(ledger) == nil && ledger.erasureJournalProblem == nil)
            // The journal cannot be written (a directory in its place refuses the write, as a full disk would): the
            // erasure stands, its line is owed, and readiness says so.
            let saved = try Data(contentsOf: journalURL)
            try FileManager.default.removeItem(atPath: journal)
            try FileManager.default.createDirectory(atPath: journal, withIntermediateDirectories: false)
            let second = try await ledger.append(request([.erase(kept, reason: "ticket 10")]))
            let secondSeq = try #require(second.outcomes.first?.seq)
            #expect(ledger.erasureJournalProblem != nil)
            #expect(try owed(ledger) == secondSeq)
            // Once it can be, the line is written before the next write.
            try FileManager.default.removeItem(atPath: journal)
            try saved.write(to: journalURL)
            _ = try await ledger.append(request([.register(third, platform: "android", appID: "app")]))
            #expect(try reasons() == ["ticket 9", "ticket 10"])
            #expect(try owed(ledger) == nil && ledger.erasureJournalProblem == nil)
            thirdSeq = try #require(try await ledger.append(request([.erase(third, reason: "ticket 11")])).outcomes[0].seq)
        }
        let whole = try Data(contentsOf: journalURL)
        let twoLines = whole.prefix { _ in true }.split(separator: UInt8(ascii: "\n")).prefix(2)
            .reduce(Data()) { $0 + $1 + Data([UInt8(ascii: "\n")]) }
        #expect(try reasons() == ["ticket 9", "ticket 10", "ticket 11"])
        // A crash tore the third line after its erasure committed: the data file still owes it (as it would have,
        // the line not yet synced), and the next open writes it again, the torn bytes dropped.
        try (twoLines + whole[twoLines.count...].prefix(25)).write(to: journalURL)
        try LMDBEnvironment(path: ledgerDirectory).write { txn in
            try txn.put(try txn.openDatabase("meta"), key: ErasureJournal.owedKey, value: thirdSeq)
        }
        #expect(ErasureJournal.isTorn(directory: ledgerDirectory))
        do {
            let ledger = try openTestLedger(directory)
            defer { ledger.close() }
            #expect(try Data(contentsOf: journalURL) == whole, "the torn line written again")
            #expect(try owed(ledger) == nil)
        }
        // A torn line the data file owes nothing for (a copy restored beside a journal a crash tore): the open stops.
        try (whole + Data(#"{"actor":"admin","pseud"#.utf8)).write(to: journalURL)
        let torn = try #require(throws: StoreError.self) { try openTestLedger(directory) }
        #expect(torn.code == .corrupt && torn.message.contains("torn"), "\(torn.message)")
        // A damaged line in the middle (an edit, a bad disk block) would lose an erasure: the open stops, naming it.
        var lines = String(decoding: whole, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
        lines[0] = "{not json"
        try Data(lines.joined(separator: "\n").utf8).write(to: journalURL)
        let damaged = try #require(throws: StoreError.self) { try openTestLedger(directory) }
        #expect(damaged.code == .corrupt)
        #expect(damaged.message.contains("erasures.jsonl line 1"), "\(damaged.message)")
    }

    @Test("a batch erases each known token once; unknown and repeated tokens are not found")
    func batch() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        try await history(ledger)
        let unknown = try RegistrationToken("never-registered")
        let receipt = try await ledger.append(
            request([
                .erase(erased, reason: "r"), .erase(unknown, reason: "r"), .erase(kept, reason: "r"),
                .erase(erased, reason: "r"),
            ]))
        #expect(receipt.outcomes.map { $0.seq != nil } == [true, false, true, false])
        #expect(receipt.outcomes[1].rejection?.code == .notFound)
        for token in [erased, kept] {
            #expect(IdentifierSearch.files(under: directory.path, holding: Array(token.rawValue.utf8)) == [])
        }
        let report = try ledger.verify()
        #expect(report.problems == [])
        #expect(report.erasures == 2)
    }

    @Test("a request that erases and does something else is refused whole")
    func mixed() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        try await history(ledger)
        await #expect(throws: StoreError.self) {
            _ = try await ledger.append(
                request([.erase(erased, reason: "r"), .subscribe(kept, try TopicName("x"), via: .v1)]))
        }
        #expect(!IdentifierSearch.files(under: directory.path, holding: Array(erased.rawValue.utf8)).isEmpty)
    }
}
