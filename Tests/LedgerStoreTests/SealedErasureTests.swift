import Foundation
import LMDBKit
import LedgerCore
import LedgerQueries
import LedgerTestSupport
import Testing

@testable import LedgerStore

/// Sealed fields against the linking attack (docs/compliance.md, "What stays linkable"): whoever holds an erased
/// token rebuilds each event that could name it, hashes it after the record before, and compares with every stored
/// hash. A ledger that sealed its fields gives no match; one written before gives one per rewritten record, and
/// `verify` counts those as `linkable`.
@Suite("Sealed fields and erasure", .offThePool)
struct SealedErasureTests {
    private let erased = ErasureFixture.erased
    private let kept = ErasureFixture.kept
    private let apnsToken = ErasureFixture.apnsToken
    private func request(_ operations: [LedgerOperation], actor: String = "admin") -> WriteRequest {
        ErasureFixture.request(operations, actor: actor)
    }

    /// The device to erase registers, gives an APNs token, subscribes, is sent to by token (its token in the data
    /// too) and by topic, acknowledges, clears its APNs token and unsubscribes; another device shares the topic.
    private func history(_ ledger: Ledger) async throws {
        _ = try await ledger.append(
            request([.register(erased, platform: "ios", appID: "app"), .register(kept, platform: "ios", appID: "app")]))
        try await activity(ledger)
    }

    private func activity(_ ledger: Ledger) async throws {
        _ = try await ledger.append(request([.setAPNsToken(erased, apnsToken)]))
        _ = try await ledger.append(request([.subscribe(erased, try TopicName("news"), via: .v1)]))
        _ = try await ledger.append(request([.subscribe(kept, try TopicName("news"), via: .v1)]))
        let json = Array("{\"token\":\"\(erased.rawValue)\",\"data\":{\"note\":\"Your result is ready, Anna\"}}".utf8)
        _ = try await ledger.append(request([.send(.token(erased), precedence: .leftToRight, messageJSON: json)]))
        _ = try await ledger.append(
            request([
                .send(
                    .topic(try TopicName("news")), precedence: .leftToRight,
                    messageJSON: Array("{\"data\":{\"about\":\"\(erased.rawValue)\"}}".utf8))
            ]))
        ledger.waitForAudiences()
        let head = try ledger.read { try $0.head().seq }
        _ = try await ledger.append(request([.acknowledge(erased, through: head)], actor: "device"))
        _ = try await ledger.append(request([.clearAPNsToken(erased, reason: "deleted by the device")]))
        _ = try await ledger.append(request([.unsubscribe(erased, try TopicName("news"), via: .v1)]))
    }

    /// The seqs of the records whose stored hash the token's holder reproduces: each record's event with every
    /// registration token slot set to the token, every APNs token slot to the APNs token, hashed as the builds
    /// before sealing did (its bytes) and as a sealed record with plain values would be.
    private func linked(_ ledger: Ledger) throws -> [UInt64] {
        try ledger.readLog { snapshot in
            var matches: [UInt64] = []
            try snapshot.forEachChainedEvent { event, previous, stored in
                // Audiences and erasures name no token: nothing to rebuild.
                guard event.body.sealedValueCount > 0 else { return true }
                let hash = Array(stored)
                var guess = event
                guess.seals = nil
                guess.body = guess.body.replacingSealedValues { _, value in
                    switch value {
                    case .token: .token(erased)
                    case .apnsToken: .apnsToken(apnsToken)
                    case .content(let json): .content(json)
                    }
                }
                let plain = EventCodec.encode(guess)
                let candidates = [plain, [EventCodec.sealedVersion] + plain.dropFirst()]
                if candidates.contains(where: { bytes in
                    bytes.withUnsafeBytes { HashChain.hash(previous: previous, encodedEvent: $0) } == hash
                }) {
                    matches.append(event.seq)
                }
                return true
            }
            return matches
        }
    }

    @Test("a sealed ledger: after the erasure no stored hash is reproduced from the token; every hash recomputes")
    func sealedLedgerIsNotLinkable() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        try await history(ledger)
        // The key of the device's registration record, there until the erasure.
        let key = try #require(try ledger.readLog { try $0.event(at: 1)?.seals?.first?.key })
        #expect(!IdentifierSearch.files(under: directory.path, holding: key).isEmpty)
        _ = try await ledger.append(request([.erase(erased, reason: "GDPR Art. 17 request #7")]))
        _ = try await ledger.append(request([.subscribe(kept, try TopicName("later"), via: .v1)]))

        #expect(IdentifierSearch.files(under: directory.path, holding: key) == [], "the key leaves every file")
        #expect(try linked(ledger) == [])
        // Every key left in the ledger, tried against every forgotten commitment with the token and the APNs token:
        // none opens one. The key taken before the erasure opens its own record's alone (a key per value).
        let (keys, commitments) = try ledger.readLog { snapshot in
            var keys: [[UInt8]] = []
            var commitments: [[UInt8]] = []
            try snapshot.forEachEvent { event, _ in
                for seal in event.seals ?? [] {
                    if let key = seal.key { keys.append(key) }
                    if let commitment = seal.commitment { commitments.append(commitment) }
                }
                return true
            }
            return (keys, commitments)
        }
        #expect(commitments.count >= 8)
        let opened = keys.contains { key in
            [Array(erased.rawValue.utf8), apnsToken.bytes].contains { commitments.contains(Seal.commitment(key: key, value: $0)) }
        }
        #expect(!opened)
        let token = Array(erased.rawValue.utf8)
        #expect(commitments.filter { $0 == Seal.commitment(key: key, value: token) }.count == 1)
        let report = try ledger.verify(checkAudiences: true)
        #expect(report.problems == [])
        #expect(report.linkable == 0)
        #expect(report.redactedEvents >= 8)
        // Every record is sealed and names the device only through forgotten seals.
        try ledger.readLog { snapshot in
            for seq in 1...(try snapshot.head().seq) {
                let event = try #require(try snapshot.event(at: seq))
                #expect(event.seals != nil, "seq \(seq) is sealed")
                if case .sent(let sent) = event.body, case .token = sent.target {
                    #expect(sent.messageJSON.isEmpty, "the content of a send addressed to the device is forgotten")
                    #expect(event.seals?.last?.isForgotten == true)
                }
            }
        }
        // The other device's records keep their values and keys: its token still verifies through them.
        #expect(!IdentifierSearch.files(under: directory.path, holding: Array(kept.rawValue.utf8)).isEmpty)
        for identifier in [Array(erased.rawValue.utf8), apnsToken.bytes, Array("Anna".utf8)] {
            #expect(IdentifierSearch.files(under: directory.path, holding: identifier) == [])
        }
    }

    @Test("a ledger written before sealing: the token's holder finds the rewritten records, and verify counts them")
    func legacyLedgerIsLinkableAndSaysSo() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory) { $0.limits.sealsEvents = false }
        defer { ledger.close() }
        try await history(ledger)
        _ = try await ledger.append(request([.erase(erased, reason: "GDPR Art. 17 request #7")]))

        let matches = try linked(ledger)
        #expect(matches.count >= 6, "registered, APNs set and clear, subscribe, unsubscribe, acknowledged")
        let report = try ledger.verify(checkAudiences: true)
        #expect(report.problems == [])
        #expect(report.linkable == report.redactedEvents)
        #expect(report.linkable >= matches.count)
        // The erasure's own count says the same, the topic send that named the device only in its data included.
        let erasures: [ErasureRecord] = try ledger.read { try $0.erasures() }
        #expect(erasures.count == 1)
        #expect(erasures.first?.linkable.map { Int($0) } == Int(report.linkable))
    }

    @Test("a ledger of layout 10 upgrades in place: older records stay as they are, new ones are sealed")
    func upgradeInPlace() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        do {
            let ledger = try openTestLedger(directory) { $0.limits.sealsEvents = false }
            _ = try await ledger.append(
                request([.register(erased, platform: "ios", appID: "app"), .register(kept, platform: "ios", appID: "app")]))
            _ = try await ledger.append(request([.subscribe(erased, try TopicName("old"), via: .v1)]))
            ledger.close()
        }
        let path = (directory.path as NSString).appendingPathComponent(ProjectID.default.rawValue)
        try LMDBEnvironment(path: path).write { txn in
            let meta = try txn.openDatabase("meta")
            try txn.put(meta, key: "layoutVersion", value: UInt32(10))
        }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        let before = try ledger.read { try $0.head().seq }
        try await activity(ledger)
        let (old, new) = try ledger.readLog { snapshot in
            (try snapshot.event(at: before), try snapshot.event(at: before + 1))
        }
        #expect(old?.seals == nil)
        #expect(new?.seals != nil)
        #expect(try ledger.verify().problems == [])
        _ = try await ledger.append(request([.erase(erased, reason: "request #9")]))
        // The two records from before the upgrade that named the device (its registration, seq 1, and its
        // subscription, seq 3) are linkable; the sealed ones are not.
        #expect(try linked(ledger) == [1, 3])
        let report = try ledger.verify(checkAudiences: true)
        #expect(report.problems == [])
        #expect(report.linkable == 2)
        // A rebuild learns the keys again from the sealed records: the projections equal the live ones.
        #expect(try ledger.verify().problems == [])
    }

    @Test("a device sharing the erased device's APNs token keeps its record, and verify stays sound")
    func sharedAPNsToken() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        try await history(ledger)
        _ = try await ledger.append(request([.setAPNsToken(kept, apnsToken)]))
        _ = try await ledger.append(request([.erase(erased, reason: "request #11")]))
        #expect(try ledger.verify().problems == [])
        #expect(try ledger.read { try $0.apnsToken(of: kept) } == apnsToken)
        #expect(try linked(ledger) == [])
    }

    /// A ledger with ``history``, after `prepare`, and the seq of the first event `pick` chooses; closed.
    private func ledger(
        _ directory: TemporaryDirectory, prepare: (Ledger) async throws -> Void = { _ in },
        picking pick: @escaping (LedgerEvent) -> Bool
    ) async throws -> (path: String, seq: UInt64) {
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        try await history(ledger)
        try await prepare(ledger)
        let seq = try ledger.readLog { snapshot in
            var found: UInt64 = 0
            try snapshot.forEachEvent { event, _ in
                if pick(event) { found = event.seq }
                return found == 0
            }
            return found
        }
        return (ledger.directory, seq)
    }

    /// Rewrites the record at `seq` as whoever holds the file could: `change` edits the decoded event, the stored
    /// hash is kept; expects the forged record still to recompute that hash (a forgotten value's commitment stands
    /// for it whatever stands in its place).
    private func forge(path: String, seq: UInt64, _ change: (inout LedgerEvent) throws -> Void) throws {
        try withRawLog(directory: path) { txn, log throws in
            let record = try #require(try txn.value(in: log, forKey: seq))
            let (hash, encoded) = try record.withUnsafeBytes { bytes in
                let parts = try HashChain.split(record: bytes)
                return (Array(parts.hash), Array(parts.encodedEvent))
            }
            var event = try EventCodec.decode(encoded)
            try change(&event)
            let forged = EventCodec.encode(event)
            let previous = try #require(try txn.value(in: log, forKey: seq - 1)).prefix(HashChain.hashSize)
            #expect(
                try forged.withUnsafeBytes { try HashChain.recomputedHash(previous: previous, encodedEvent: $0) } == hash,
                "the forged record keeps its hash")
            try txn.put(log, key: seq, value: hash + forged)
        }
    }

    private func problems(_ directory: TemporaryDirectory) throws -> [String] {
        let reopened = try openTestLedger(directory, mode: .readOnly)
        defer { reopened.close() }
        return try reopened.verify().problems
    }

    @Test("a stand-in no erasure or retention puts there is damage: verify names the record")
    func forgedStandInIsDamage() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let kept = self.kept
        // The kept device's subscription to news.
        let (path, seq) = try await ledger(directory) {
            if case .subscribed(let token, _, _) = $0.body { token == kept } else { false }
        }
        for reason in ["x", Seal.erasure] {
            // Whoever holds the file forgets the token "properly" — its commitment kept, so the hash still recomputes —
            // and puts another in its place.
            try forge(path: path, seq: seq) { event in
                let original = event
                event.body = original.body.replacingSealedValues { _, value in
                    if case .token = value { return .token(RegistrationToken(trusted: "someone-else-entirely-0123456789")) }
                    return value
                }
                event.seals = try #require(original.seals(forgettingChangesIn: event.body, reason: reason))
            }
            let problems = try problems(directory)
            #expect(problems.contains { $0.hasPrefix("seq \(seq): a ") }, "\(reason): \(problems)")
            #expect(!problems.contains { $0.contains("hash mismatch") }, "the hash alone does not see it")
        }
    }

    @Test("a content put back into a send to an erased device keeps the record's hash, and verify names it")
    func contentPutBackIsDamage() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let erased = self.erased
        // The send addressed to the device, its content forgotten by the erasure.
        let (path, seq) = try await ledger(directory) { ledger in
            _ = try await ledger.append(self.request([.erase(erased, reason: "request #12")]))
            #expect(try ledger.verify().problems == [])
        } picking: {
            if case .sent(let sent) = $0.body, case .token = sent.target { true } else { false }
        }
        try forge(path: path, seq: seq) { event in
            guard case .sent(var sent) = event.body else { throw StoreError(.corrupt, "not a send") }
            #expect(sent.messageJSON.isEmpty && event.contentForgotten == Seal.erasure)
            sent.messageJSON = Array(#"{"data":{"note":"Your result is ready, Anna"}}"#.utf8)
            event.body = .sent(sent)
        }
        #expect(try problems(directory).contains("seq \(seq): a send to an erased device keeps a content"))
    }
}
