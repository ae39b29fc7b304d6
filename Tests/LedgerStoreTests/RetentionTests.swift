import Foundation
import LMDBKit
import LedgerCore
import LedgerQueries
import LedgerTestSupport
import Testing

@testable import LedgerStore

/// Retention (``LedgerOperation/forgetContents(before:limit:)``, ``Ledger/endedRegistrations(before:limit:)``):
/// the contents of old sends are forgotten with their hashes intact, on the leader and on a follower applying its
/// blocks, and no file keeps them; a send written before sealing keeps its content and is counted.
@Suite("Retention", .offThePool)
struct RetentionTests {
    private let device = try! RegistrationToken("cAAAAAAAAAAAAAAAAAAAAA:APA91b-retain-0123456789abcdefghijklmnopqrstuv")
    private let other = try! RegistrationToken("dBBBBBBBBBBBBBBBBBBBBB:APA91b-other-0123456789abcdefghijklmnopqrstuvw")
    private let oldContent = "Your test result is ready, Anna \(UUID().uuidString)"
    private let newContent = "Your appointment is confirmed, Bert \(UUID().uuidString)"

    private func request(_ operations: [LedgerOperation], time: LedgerTime? = nil) -> WriteRequest {
        WriteRequest(actor: "admin", requestID: UUID().uuidString, time: time, operations: operations)
    }

    /// An hour ahead of the clock: the events the store stamps itself (audiences, erasures, the sweep) come after
    /// the tests' own times, however slow the machine.
    private static func start() -> LedgerTime {
        LedgerTime(microseconds: LedgerTime.now().microseconds + 3_600_000_000)
    }

    private func json(_ note: String) -> [UInt8] { Array("{\"data\":{\"note\":\"\(note)\"}}".utf8) }

    /// A device on topic `news`, an old send at `start` and a new one ten seconds later; their seqs.
    private func history(_ ledger: Ledger, start: LedgerTime) async throws -> (old: UInt64, new: UInt64) {
        _ = try await ledger.append(request([.register(device, platform: "android", appID: "app")], time: start))
        _ = try await ledger.append(request([.subscribe(device, try TopicName("news"), via: .v1)], time: start))
        let old = try await ledger.append(
            request(
                [.send(.topic(try TopicName("news")), precedence: .leftToRight, messageJSON: json(oldContent))],
                time: start))
        let later = LedgerTime(microseconds: start.microseconds + 10_000_000)
        let new = try await ledger.append(
            request(
                [.send(.topic(try TopicName("news")), precedence: .leftToRight, messageJSON: json(newContent))],
                time: later))
        ledger.waitForAudiences()
        return (old.outcomes[0].seq!, new.outcomes[0].seq!)
    }

    private func forget(_ ledger: Ledger, before cutoff: LedgerTime) async throws -> OperationOutcome {
        try await ledger.append(
            WriteRequest(
                actor: "retention", requestID: UUID().uuidString,
                operations: [.forgetContents(before: cutoff, limit: 100)])
        ).outcomes[0]
    }

    @Test("a sealed send older than the cut-off loses its content, keeps its hash, and no file holds the content")
    func forgetsOldContent() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        let start = Self.start()
        let (old, new) = try await history(ledger, start: start)
        let hashes = try ledger.read { snapshot in try [snapshot.hash(at: old), snapshot.hash(at: new)] }
        let file = ledger.directory + "/data.mdb"
        let before = try FileManager.default.attributesOfItem(atPath: file)[.systemFileNumber] as? Int
        let outcome = try await forget(ledger, before: LedgerTime(microseconds: start.microseconds + 5_000_000))
        #expect(try FileManager.default.attributesOfItem(atPath: file)[.systemFileNumber] as? Int != before, "compacted")
        let seq = try #require(outcome.seq)
        let sweep = try ledger.read { try $0.event(at: seq) }
        guard case .retention(let recorded)? = sweep?.body else {
            Issue.record("no retention event at \(seq)")
            return
        }
        #expect(recorded.forgottenContents == 1 && recorded.unsealedContents == 0)
        #expect(recorded.firstSeq == 1 && recorded.throughSeq >= old && recorded.throughSeq < new)
        let (oldEvent, newEvent) = try ledger.read { (try $0.event(at: old)!, try $0.event(at: new)!) }
        #expect(oldEvent.contentForgotten == RetentionSweep.reason(at: sweep!.time))
        #expect(oldEvent.contentForgotten?.hasPrefix("retention at ") == true)
        if case .sent(let sent) = oldEvent.body { #expect(sent.messageJSON.isEmpty) }
        #expect(newEvent.contentForgotten == nil)
        if case .sent(let sent) = newEvent.body { #expect(sent.messageJSON == json(newContent)) }
        // The records keep their hashes, and each still recomputes from its bytes.
        #expect(try ledger.read { snapshot in try [snapshot.hash(at: old), snapshot.hash(at: new)] } == hashes)
        let report = try ledger.verify(checkAudiences: true)
        #expect(report.isSound, "\(report.problems)")
        #expect(report.linkable == 0)
        // Compacted: no page of any file keeps the content; the newer one is still there.
        #expect(IdentifierSearch.files(under: directory.path, holding: Array(oldContent.utf8)) == [])
        #expect(!IdentifierSearch.files(under: directory.path, holding: Array(newContent.utf8)).isEmpty)
        // Nothing left before the cut-off: the next sweep changes nothing.
        #expect(
            try await forget(ledger, before: LedgerTime(microseconds: start.microseconds + 5_000_000)) == .unchanged)
        #expect(try ledger.retentionSweptThrough() == recorded.throughSeq)
    }

    @Test("a follower applying the leader's retention event forgets the same contents, byte for byte, and compacts")
    func followerForgetsToo() async throws {
        let leaderDirectory = TemporaryDirectory()
        let followerDirectory = TemporaryDirectory()
        defer {
            leaderDirectory.remove()
            followerDirectory.remove()
        }
        let gate = KeepingGate()
        let leader = try openTestLedger(leaderDirectory) { $0.replication = gate }
        let follower = try openTestLedger(followerDirectory) { $0.replication = KeepingGate() }
        let start = Self.start()
        let (old, _) = try await history(leader, start: start)
        for block in gate.take() { _ = try follower.applyReplicated(block) }
        #expect(!IdentifierSearch.files(under: followerDirectory.path, holding: Array(oldContent.utf8)).isEmpty)
        #expect(try await forget(leader, before: LedgerTime(microseconds: start.microseconds + 5_000_000)).seq != nil)
        for block in gate.take() { _ = try follower.applyReplicated(block) }
        #expect(try follower.read { try $0.head() } == leader.read { try $0.head() })
        #expect(try follower.read { try $0.event(at: old)?.contentForgotten }?.hasPrefix("retention at ") == true)
        // A follower that becomes leader continues after the range its copy recorded.
        #expect(try follower.retentionSweptThrough() == leader.retentionSweptThrough())
        #expect(try follower.retentionSweptThrough() >= old)
        #expect(IdentifierSearch.files(under: followerDirectory.path, holding: Array(oldContent.utf8)) == [])
        #expect(follower.compactionProblem == nil)
        let (leaderPath, followerPath) = (leader.directory, follower.directory)
        leader.close()
        follower.close()
        #expect(
            try rawDump(directory: leaderPath, databases: ["log"])
                == rawDump(directory: followerPath, databases: ["log"]))
        let reopened = try openTestLedger(followerDirectory, mode: .readOnly)
        defer { reopened.close() }
        let report = try reopened.verify()
        #expect(report.isSound, "\(report.problems)")
    }

    @Test("a content an erasure rewrote (it named the device) is forgotten too; verify still accounts for it")
    func contentRewrittenByAnErasure() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        let start = Self.start()
        _ = try await ledger.append(request([.register(device, platform: "android", appID: "app")], time: start))
        _ = try await ledger.append(request([.subscribe(device, try TopicName("news"), via: .v1)], time: start))
        let sent = try await ledger.append(
            request(
                [
                    .send(
                        .topic(try TopicName("news")), precedence: .leftToRight,
                        messageJSON: json("\(oldContent) for \(device.rawValue)"))
                ], time: start))
        ledger.waitForAudiences()
        let seq = try #require(sent.outcomes[0].seq)
        _ = try await ledger.append(request([.erase(device, reason: "r")]))
        #expect(try ledger.read { try $0.event(at: seq)?.contentForgotten } == Seal.erasure)
        let cutoff = LedgerTime(microseconds: start.microseconds + 5_000_000)
        let sweep = try #require(try await forget(ledger, before: cutoff).seq)
        let sweepTime = try #require(try ledger.read { try $0.event(at: sweep)?.time })
        #expect(
            try ledger.read { try $0.event(at: seq)?.contentForgotten }
                == ContentRetention.afterErasure(RetentionSweep.reason(at: sweepTime)))
        #expect(IdentifierSearch.files(under: directory.path, holding: Array(oldContent.utf8)) == [])
        let report = try ledger.verify()
        #expect(report.isSound, "\(report.problems)")
    }

    @Test("a send written before sealing keeps its content (its hash is over it) and is counted as unsealed")
    func unsealedSendsAreKept() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory) { $0.limits.sealsEvents = false }
        defer { ledger.close() }
        let start = Self.start()
        let (old, _) = try await history(ledger, start: start)
        let file = ledger.directory + "/data.mdb"
        let before = try FileManager.default.attributesOfItem(atPath: file)[.systemFileNumber] as? Int
        let seq = try #require(
            try await forget(ledger, before: LedgerTime(microseconds: start.microseconds + 5_000_000)).seq)
        guard case .retention(let recorded)? = try ledger.read({ try $0.event(at: seq) })?.body else {
            Issue.record("no retention event at \(seq)")
            return
        }
        #expect(recorded.forgottenContents == 0 && recorded.unsealedContents == 1)
        // Nothing forgotten, no page freed that held a content: the file is not compacted (rewritten anew).
        #expect(try FileManager.default.attributesOfItem(atPath: file)[.systemFileNumber] as? Int == before)
        #expect(try ledger.read { try $0.event(at: old)?.contentForgotten } == nil)
        #expect(try ledger.verify().isSound)
    }

    @Test("a device's inbox leaves out a send older than contentRetention, and one whose content is forgotten")
    func inboxLeavesOutForgottenSends() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        let start = Self.start()
        let (old, new) = try await history(ledger, start: start)
        func cursors(sentSince: LedgerTime?) throws -> (messages: [UInt64], through: UInt64) {
            try ledger.read { snapshot in
                let instance = try #require(try snapshot.instanceID(of: device))
                let page = try snapshot.inbox(
                    of: instance, after: 0, now: LedgerTime(microseconds: start.microseconds + 20_000_000),
                    limit: 10, sends: SendCache(project: .default), sentSince: sentSince)
                return (page.messages.map(\.cursor), page.through)
            }
        }
        #expect(try cursors(sentSince: nil).messages == [old, new])
        // Older than the retention (sent before `sentSince`): left out, the cursor moves past it.
        let retained = try cursors(sentSince: LedgerTime(microseconds: start.microseconds + 5_000_000))
        #expect(retained.messages == [new] && retained.through >= new)
        // Forgotten by a sweep: left out, whatever the retention now says.
        _ = try await forget(ledger, before: LedgerTime(microseconds: start.microseconds + 5_000_000))
        #expect(try cursors(sentSince: nil).messages == [new])
    }

    @Test("the devices whose registration ended before the cut-off, not those registered or erased")
    func endedRegistrations() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        let start = Self.start()
        let third = try RegistrationToken("eCCCCCCCCCCCCCCCCCCCCC:APA91b-third-0123456789abcdefghijklmnopqrstuvw")
        _ = try await ledger.append(
            request(
                [
                    .register(device, platform: nil, appID: nil), .register(other, platform: nil, appID: nil),
                    .register(third, platform: nil, appID: nil),
                ], time: start))
        _ = try await ledger.append(
            request([.unregister(device, reason: "r"), .unregister(third, reason: "r")], time: start))
        _ = try await ledger.append(request([.erase(third, reason: "r")]))
        let late = LedgerTime(microseconds: start.microseconds + 10_000_000)
        _ = try await ledger.append(request([.unregister(other, reason: "r")], time: late))
        let cutoff = LedgerTime(microseconds: start.microseconds + 5_000_000)
        #expect(try ledger.endedRegistrations(before: cutoff, limit: 10) == [device])
        #expect(try ledger.endedRegistrations(before: start, limit: 10) == [])
    }
}
