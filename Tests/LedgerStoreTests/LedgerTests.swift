import Foundation
import LMDBKit
import LedgerCore
import LedgerStore
import LedgerTestSupport
import Testing
import LedgerQueries

@Suite("Ledger", .offThePool)
struct LedgerTests {
    let token = try! RegistrationToken("device-1:APA91b")

    func request(_ operations: LedgerOperation..., time: LedgerTime? = nil) -> WriteRequest {
        WriteRequest(actor: "test", requestID: UUID().uuidString, time: time, operations: operations)
    }

    /// Appends `operations` to a new ledger in `directory`, closes and releases it (so its LMDB files can be
    /// opened underneath), and returns the ledger's own directory.
    func closedLedger(in directory: TemporaryDirectory, _ operations: [LedgerOperation]) async throws -> String {
        let ledger = try openTestLedger(directory)
        _ = try await ledger.append(WriteRequest(actor: "test", requestID: "setup", operations: operations))
        ledger.close()
        return ledger.directory
    }

    /// Changes the closed ledger in `ledgerDirectory` underneath the store, in one LMDB write transaction; the
    /// environment is closed again before this returns.
    func editUnderneath(_ ledgerDirectory: String, _ body: (LMDBTransaction) throws -> Void) throws {
        let environment = try LMDBEnvironment(path: ledgerDirectory)
        try environment.write { txn in try body(txn) }
    }

    @Test("the 2001st topic of one instance is refused and changes nothing")
    func topicLimit() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        _ = try await ledger.append(request(.register(token, platform: "ios", appID: nil)))
        let topics = try (0..<2000).map { try TopicName("t\($0)") }
        let receipt = try await ledger.append(
            WriteRequest(
                actor: "test", requestID: "bulk",
                operations: topics.map { .subscribe(token, $0, via: .iid) }))
        #expect(receipt.outcomes.allSatisfy { $0.rejection == nil })
        let headBefore = try ledger.readLog { try $0.head() }
        let refused = try await ledger.append(request(.subscribe(token, try TopicName("one-too-many"), via: .v1)))
        #expect(refused.outcomes.first?.rejection?.code == .tooManyTopics)
        #expect(try ledger.readLog { try $0.head() } == headBefore)
        try ledger.read { snapshot throws in
            #expect(try snapshot.topicID(of: try TopicName("one-too-many")) == nil)
            #expect(try snapshot.topics(of: snapshot.instanceID(of: token)!).count == 2000)
        }
        // Re-subscribing to a held topic at the limit is an accepted no-op, and appends nothing.
        let again = try await ledger.append(request(.subscribe(token, topics[0], via: .client)))
        #expect(again.outcomes.first == .unchanged)
        #expect(try ledger.readLog { try $0.head() } == headBefore)
        // After leaving one topic there is room again.
        _ = try await ledger.append(request(.unsubscribe(token, topics[1], via: .v1)))
        let accepted = try await ledger.append(request(.subscribe(token, try TopicName("one-too-many"), via: .v1)))
        #expect(accepted.outcomes.first?.rejection == nil)
    }

    @Test("rejections: unknown tokens, duplicates, missing subscriptions; nothing is appended for them")
    func rejections() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        let news = try TopicName("news")
        let stranger = try RegistrationToken("stranger")
        let receipt = try await ledger.append(
            request(
                .subscribe(stranger, news, via: .iid),
                .register(token, platform: nil, appID: nil),
                .register(token, platform: nil, appID: nil),
                .subscribe(token, news, via: .v1, failIfPresent: true),
                .subscribe(token, news, via: .v1, failIfPresent: true),
                .unsubscribe(token, try TopicName("other"), via: .v1, failIfAbsent: true),
                .unsubscribe(token, try TopicName("other"), via: .iid),
                .send(.token(stranger), precedence: .leftToRight, messageJSON: []),
                .recordAudience(AudienceRecord(messageID: 99, sendSeq: 1, recipientCount: 0, recipientDigest: []))
            ))
        let codes = receipt.outcomes.map { $0.rejection?.code }
        #expect(codes == [.notFound, nil, .alreadyExists, nil, .alreadyExists, .notFound, nil, .notFound, .notFound])
        // The allowed unsubscribe of a missing subscription is accepted and changes nothing: no event.
        #expect(receipt.outcomes[6] == .unchanged)
        #expect(receipt.outcomes.compactMap(\.seq) == [1, 2])
        #expect(try ledger.readLog { try $0.head().seq } == 2)
    }

    @Test("sends get unique message ids; the audience is recorded once")
    func sendsAndAudiences() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        let receipt = try await ledger.append(
            WriteRequest(
                actor: "admin", requestID: "s",
                operations: (0..<50).map { _ in
                    .send(.topic(try! TopicName("news")), precedence: .standard, messageJSON: Array("{}".utf8))
                }))
        var ids: Set<UInt64> = []
        for outcome in receipt.outcomes {
            guard case .sent(let seq, let id) = outcome else {
                Issue.record("expected a send")
                return
            }
            #expect(id >= 1 && id <= UInt64(Int64.max))
            ids.insert(id)
            #expect(try ledger.read { try $0.message(id)?.sendSeq } == seq)
        }
        #expect(ids.count == 50)
        // Every send gets exactly one audience event, appended by the recorder after the send.
        ledger.waitForAudiences()
        let emptyDigest = sha256Hex("")
        for id in ids {
            let (sendSeq, audienceSeq) = try ledger.read { try $0.message(id)! }
            let audienceAt = try #require(audienceSeq)
            let event = try #require(try ledger.read { try $0.event(at: audienceAt) })
            guard case .audience(let record) = event.body else {
                Issue.record("seq \(String(describing: audienceSeq)) is not an audience event")
                continue
            }
            #expect(record.messageID == id && record.sendSeq == sendSeq && sendSeq < event.seq)
            #expect(record.recipientCount == 0)
            #expect(record.recipientDigest.map { String(format: "%02x", $0) }.joined() == emptyDigest)
        }
        #expect(try ledger.read { try $0.head().seq } == 100)
        // A second audience for a message is refused.
        let first = ids.first!
        let sendSeq = try ledger.read { try $0.message(first)!.sendSeq }
        let audience = AudienceRecord(messageID: first, sendSeq: sendSeq, recipientCount: 0, recipientDigest: [])
        let again = try await ledger.append(request(.recordAudience(audience)))
        #expect(again.outcomes[0].rejection?.code == .alreadyExists)
    }

    @Test("64 concurrent writers: every acknowledged event is durable, the seq is gapless, group commit batches")
    func groupCommit() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        let tokens = try (0..<64).map { try RegistrationToken("writer-\($0)") }
        _ = try await ledger.append(
            WriteRequest(
                actor: "t", requestID: "reg", operations: tokens.map { .register($0, platform: nil, appID: nil) }))
        let perWriter = 20
        let seqs = try await withThrowingTaskGroup(of: [UInt64].self) { group in
            for (index, token) in tokens.enumerated() {
                group.addTask {
                    var seqs: [UInt64] = []
                    for round in 0..<perWriter {
                        // Subscribe, then unsubscribe, the same topic: every request changes state.
                        let topic = try TopicName("topic-\(index)-\(round / 2)")
                        let operation: LedgerOperation =
                            round.isMultiple(of: 2)
                            ? .subscribe(token, topic, via: .iid) : .unsubscribe(token, topic, via: .iid)
                        let receipt = try await ledger.append(
                            WriteRequest(actor: "t", requestID: "w\(index)-\(round)", operations: [operation]))
                        seqs.append(receipt.outcomes[0].seq!)
                    }
                    return seqs
                }
            }
            var all: [UInt64] = []
            for try await batch in group { all += batch }
            return all
        }
        #expect(Set(seqs).count == 64 * perWriter)
        #expect(seqs.min() == 65 && seqs.max() == UInt64(64 + 64 * perWriter))
        // Several requests shared a transaction: the number of distinct event times (one per commit) is
        // smaller than the number of requests.
        var times: Set<Int64> = []
        var requestIDs: Set<String> = []
        try ledger.readLog { snapshot throws in
            try snapshot.forEachEvent(from: 65) { event, _ in
                times.insert(event.time.microseconds)
                requestIDs.insert(event.requestID)
                return true
            }
        }
        #expect(requestIDs.count == 64 * perWriter)
        #expect(times.count < 64 * perWriter)
        #expect(try ledger.verify().isSound)
    }

    @Test("explicit times must not precede the head; seq(atOrBefore:) finds the state at a time")
    func times() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        let t1 = LedgerTime(parsing: "2026-03-01T00:00:00Z")!
        let t2 = LedgerTime(parsing: "2026-03-02T00:00:00Z")!
        _ = try await ledger.append(request(.register(token, platform: nil, appID: nil), time: t1))
        _ = try await ledger.append(request(.subscribe(token, try TopicName("news"), via: .v1), time: t2))
        await #expect(throws: StoreError.self) {
            _ = try await ledger.append(self.request(.unregister(self.token, reason: "x"), time: t1))
        }
        try ledger.read { snapshot throws in
            #expect(try snapshot.head().seq == 2)
            #expect(try snapshot.seq(atOrBefore: LedgerTime(parsing: "2026-02-28")!) == 0)
            #expect(try snapshot.seq(atOrBefore: t1) == 1)
            #expect(try snapshot.seq(atOrBefore: LedgerTime(parsing: "2026-03-01T12:00:00Z")!) == 1)
            #expect(try snapshot.seq(atOrBefore: t2) == 2)
            let instance = try snapshot.instanceID(of: token)!
            #expect(try snapshot.topics(of: instance, at: 1).isEmpty)
            #expect(try snapshot.topics(of: instance, at: 2).count == 1)
        }
    }

    @Test("a second writer is refused with a clear message; readers are not")
    func writerLock() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let writer = try openTestLedger(directory)
        #expect {
            _ = try openTestLedger(directory)
        } throws: { error in
            (error as? StoreError)?.code == .locked && "\(error)".contains("another process")
        }
        let reader = try openTestLedger(directory, mode: .readOnly)
        #expect(try reader.readLog { try $0.head().seq } == 0)
        _ = writer
    }

    @Test("opening a missing ledger read-only, or one for another project, fails clearly")
    func openErrors() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        #expect {
            _ = try openTestLedger(directory, mode: .readOnly)
        } throws: { error in
            (error as? StoreError)?.code == .notFound && "\(error)".contains("no ledger for project demo-project")
        }
    }

    @Test("a ledger of another store layout or encoding version fails with a clear message")
    func versions() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledgerDirectory = try await closedLedger(in: directory, [.register(token, platform: nil, appID: nil)])
        // An event written by a future encoding version: reading it names both versions.
        try withRawLog(directory: ledgerDirectory) { txn, log throws in
            var record = try txn.value(in: log, forKey: UInt64(1))!
            record[HashChain.hashSize] = 9
            try txn.put(log, key: UInt64(1), value: record)
        }
        do {
            let reader = try openTestLedger(directory, mode: .readOnly)
            #expect {
                _ = try reader.readLog { try $0.event(at: 1) }
            } throws: { error in
                (error as? LedgerCoreError)?.code == .unsupportedVersion && "\(error)".contains("version 9")
            }
        }
        // A store layout this build does not know.
        try editUnderneath(ledgerDirectory) { txn in
            try txn.put(try txn.openDatabase("meta"), key: "layoutVersion", value: UInt32(99))
        }
        #expect {
            _ = try openTestLedger(directory, mode: .readOnly)
        } throws: { error in
            (error as? StoreError)?.code == .incompatible && "\(error)".contains("layout 99")
        }
    }

    @Test("verify reports a tampered projection; rebuild repairs it")
    func projectionTampering() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledgerDirectory = try await closedLedger(
            in: directory,
            [.register(token, platform: nil, appID: nil), .subscribe(token, try TopicName("news"), via: .v1)])
        try editUnderneath(ledgerDirectory) { txn in
            let members = try txn.openDatabase("topicMembers", flags: [.duplicateSort, .duplicateFixed])
            try txn.clear(members)
        }
        do {
            let ledger = try openTestLedger(directory, mode: .readOnly)
            let report = try ledger.verify()
            #expect(!report.isSound)
            #expect(report.problems.contains { $0.contains("projection topicMembers") })
        }
        do {
            let ledger = try openTestLedger(directory)
            try ledger.rebuildProjections()
            #expect(try ledger.verify().isSound)
            #expect(try ledger.read { try $0.subscriberCount(of: 1) } == 1)
        }
    }

    @Test("a stored value shorter than its layout: the writer reads it without a trap, verify reports it")
    func shortStoredValue() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledgerDirectory = try await closedLedger(
            in: directory,
            [
                .register(token, platform: nil, appID: nil),
                .send(.token(token), precedence: .leftToRight, messageJSON: Array("{}".utf8)),
                .acknowledge(token, through: 2),
            ])
        // Three bytes where the delivery cursor's eight belong (instance 1).
        try editUnderneath(ledgerDirectory) { txn in
            try txn.put(try txn.openDatabase("acknowledged"), key: UInt32(1), value: [0, 0, 1] as [UInt8])
        }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        // The writer reads the cursor to decide an acknowledgement: a short value reads as zero-padded
        // (0x000001 followed by five zero bytes), so this one, below it, changes nothing.
        let receipt = try await ledger.append(request(.acknowledge(token, through: 2)))
        #expect(receipt.outcomes == [.unchanged])
        let report = try ledger.verify()
        #expect(!report.isSound)
        #expect(report.problems.contains { $0.contains("acknowledged") })
    }

    @Test(
        "a token's or topic's stored id that is not four bytes is refused as corrupt: nothing is written, rebuild mends it"
    )
    func shortStoredID() async throws {
        let topic = try TopicName("news")
        for database in ["tokens", "topicIDs"] {
            let directory = TemporaryDirectory()
            defer { directory.remove() }
            let ledgerDirectory = try await closedLedger(
                in: directory, [.register(token, platform: nil, appID: nil), .subscribe(token, topic, via: .v1)])
            // Three bytes where the id's four belong: read zero-padded, 0x00000100 would name instance or
            // topic 256.
            try editUnderneath(ledgerDirectory) { txn in
                let db = try txn.openDatabase(database)
                let key = try txn.withCursor(db) { cursor in try cursor.first().map { Array($0.key) } }
                try txn.put(db, key: try #require(key), value: [0, 0, 1] as [UInt8])
            }
            do {
                let ledger = try openTestLedger(directory)
                defer { ledger.close() }
                let head = try ledger.readLog { try $0.head() }
                // Readers are told why; the writer refuses the unsubscription (the server's log gets the reason,
                // the caller is told nothing was written).
                #expect {
                    _ = try ledger.read { snapshot in
                        database == "tokens" ? try snapshot.instanceID(of: token) : try snapshot.topicID(of: topic)
                    }
                } throws: {
                    ($0 as? StoreError)?.code == .corrupt && "\($0)".contains("\(database) is 3 bytes")
                        && !"\($0)".contains(token.rawValue)
                }
                await #expect {
                    _ = try await ledger.append(request(.unsubscribe(token, topic, via: .v1, failIfAbsent: true)))
                } throws: { ($0 as? StoreError)?.code == .unavailable }
                #expect(try ledger.readLog { try $0.head() } == head)
                #expect(try !ledger.verify().isSound)
            }
            let rebuilder = try openTestLedger(directory) { $0.forRebuild = true }
            try rebuilder.rebuildProjections()
            #expect(try rebuilder.verify().isSound)
            let receipt = try await rebuilder.append(request(.unsubscribe(token, topic, via: .v1, failIfAbsent: true)))
            #expect(receipt.outcomes.count == 1 && receipt.outcomes[0].rejection == nil)
            rebuilder.close()
        }
    }

    @Test("an interrupted rebuild is detected: readers and writers are told to run rebuild")
    func interruptedRebuild() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledgerDirectory = try await closedLedger(in: directory, [.register(token, platform: nil, appID: nil)])
        try editUnderneath(ledgerDirectory) { txn in
            try txn.put(try txn.openDatabase("meta"), key: "rebuildingThrough", value: UInt64(0))
        }
        #expect {
            _ = try openTestLedger(directory)
        } throws: { ($0 as? StoreError)?.code == .rebuildRequired }
        let reader = try openTestLedger(directory, mode: .readOnly)
        #expect {
            _ = try reader.read { try $0.statistics() }
        } throws: { ($0 as? StoreError)?.code == .rebuildRequired && "\($0)".contains("ledger rebuild") }
        #expect(try !reader.verify().isSound)
        let rebuilder = try openTestLedger(directory) { $0.forRebuild = true }
        try rebuilder.rebuildProjections()
        #expect(try rebuilder.verify().isSound)
        #expect(try rebuilder.read { try $0.statistics().registeredInstances } == 1)
    }
}
