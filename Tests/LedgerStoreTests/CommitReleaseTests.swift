import Foundation
import LedgerCore
import LedgerQueries
import LedgerTestSupport
import Synchronization
import Testing

@testable import LedgerStore

/// Every commit leaves by one path (``CommitRelease``): whatever wrote it — an erasure, an expiry, a block applied
/// from the cluster — the topics' membership changes are dated before the next send's audience is recorded, so a
/// recorded audience is never one from before a change.
///
/// The topic has 1,100 devices: over the inline limit (1,024), so its audiences are recorded by the recorder,
/// which reuses the digest of the last audience of a topic whose membership it believes unchanged
/// (``RecipientDigestMemo/unchangedDigest(of:at:changes:)``).
@Suite("Commit release", .offThePool)
struct CommitReleaseTests {
    private static let big = try! TopicName("big")
    private static let devices = 1_100

    private static func token(_ index: Int) -> RegistrationToken {
        try! RegistrationToken("dev\(index):APA91b-release-0123456789abcdefghijklmnopqrstuvwxyz")
    }

    private func request(_ operations: [LedgerOperation], actor: String = "admin") -> WriteRequest {
        WriteRequest(actor: actor, requestID: UUID().uuidString, operations: operations)
    }

    /// Registers the devices and subscribes them all to `big`.
    private func subscribeAll(_ ledger: Ledger) async throws {
        let operations = (0..<Self.devices).flatMap { index -> [LedgerOperation] in
            [
                .register(Self.token(index), platform: nil, appID: nil),
                .subscribe(Self.token(index), Self.big, via: .v1),
            ]
        }
        let receipt = try await ledger.append(request(operations))
        #expect(receipt.outcomes.allSatisfy { $0.seq != nil })
    }

    /// Sends to `big`, waits for its audience, and returns the message's replay.
    private func sendToBig(_ ledger: Ledger) async throws -> MessageReplay {
        let receipt = try await ledger.append(
            request([.send(.topic(Self.big), precedence: .leftToRight, messageJSON: Array("{}".utf8))]))
        guard case .sent(_, let messageID) = receipt.outcomes[0] else {
            Issue.record("not sent: \(receipt.outcomes)")
            throw StoreError(.invalidArgument, "not sent")
        }
        #expect(receipt.recordedAudiences.isEmpty, "a topic over the inline limit is left to the recorder")
        ledger.waitForAudiences()
        return try #require(try ledger.read { try MessageReplay.replay(messageID, in: $0) })
    }

    /// What the second send's audience must be after `change` took one device off `big`: 1,099 recipients,
    /// recorded as such, and every recorded audience sound.
    private func expectAudienceAfterChange(_ ledger: Ledger, first: MessageReplay) async throws {
        let second = try await sendToBig(ledger)
        #expect(second.recipientCount == Self.devices - 1)
        #expect(second.recorded?.record.recipientCount == UInt64(Self.devices - 1))
        #expect(second.recorded?.record.recipientDigest != first.recorded?.record.recipientDigest)
        let matches = second.matchesRecord
        #expect(matches, "the recorded audience is the one replay reconstructs")
        let report = try ledger.verify(checkAudiences: true)
        #expect(report.problems == [] && report.audiencesChecked == 2)
    }

    /// On one ledger: everyone on `big`, a send, `change` (which takes device 7 off), and the next send.
    private func sendAround(_ change: LedgerOperation, actor: String) async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        defer { ledger.close() }
        try await subscribeAll(ledger)
        let first = try await sendToBig(ledger)
        let firstMatches = first.matchesRecord
        #expect(first.recipientCount == Self.devices && firstMatches)
        _ = try await ledger.append(request([change], actor: actor))
        try await expectAudienceAfterChange(ledger, first: first)
    }

    @Test("after an erasure, the next send to a topic over the inline limit records the audience without the device")
    func afterErasure() async throws {
        try await sendAround(.erase(Self.token(7), reason: "GDPR Art. 17"), actor: "admin")
    }

    @Test("after an expiry (an unregistration by the sweeper), the next send's audience leaves the device out")
    func afterExpiry() async throws {
        try await sendAround(.unregister(Self.token(7), reason: "expired: no activity"), actor: "expiry")
    }

    @Test(
        "a replica that recorded a topic's audience, then applied another node's erasure, records the next one without the device"
    )
    func afterReplicatedErasure() async throws {
        let firstDirectory = TemporaryDirectory()
        let secondDirectory = TemporaryDirectory()
        defer {
            firstDirectory.remove()
            secondDirectory.remove()
        }
        // Two nodes of one project, each leading in turn; the blocks one writes are applied by the other.
        let firstGate = KeepingGate()
        let secondGate = KeepingGate()
        let first = try openTestLedger(firstDirectory) { $0.replication = firstGate }
        defer { first.close() }
        let second = try openTestLedger(secondDirectory) { $0.replication = secondGate }
        defer { second.close() }

        // The first node leads: its recorder records the first audience (and remembers its digest).
        try await subscribeAll(first)
        let before = try await sendToBig(first)
        for block in firstGate.take() { _ = try second.applyReplicated(block) }
        // The second leads and erases a device; the first applies the erasure as a follower.
        _ = try await second.append(request([.erase(Self.token(7), reason: "GDPR Art. 17")]))
        for block in secondGate.take() { _ = try first.applyReplicated(block) }
        #expect(try first.read { try $0.head() } == second.read { try $0.head() })
        // The first leads again.
        try await expectAudienceAfterChange(first, first: before)
    }
}
