import Foundation
import LedgerCore
import LedgerTestSupport
import Testing

@testable import LedgerStore

@Suite("Audience recorder", .offThePool)
struct AudienceRecorderTests {
    @Test("the backlog counts the sends queued and being recorded, and is zero once they are done")
    func backlog() {
        let gate = DispatchSemaphore(value: 0)
        let recorder = AudienceRecorder(
            compute: { sends in
                gate.wait()
                return sends.map {
                    AudienceRecord(messageID: $0.messageID, sendSeq: $0.sendSeq, recipientCount: 0, recipientDigest: [])
                }
            },
            // A failed append is logged and the sends are left for the next open: the backlog still drains.
            submit: { _ in .failure(StoreError(.unavailable, "test")) }, logger: quietLogger)
        defer { recorder.stop() }
        #expect(recorder.backlog == 0)
        recorder.enqueue((1...3).map { PendingAudience(messageID: $0, sendSeq: $0 * 10) })
        #expect(recorder.backlog == 3)
        recorder.enqueue((4...5).map { PendingAudience(messageID: $0, sendSeq: $0 * 10) })
        #expect(recorder.backlog == 5)
        // Whichever batches the thread took, at most two computations wait at the gate.
        gate.signal()
        gate.signal()
        recorder.waitUntilIdle()
        #expect(recorder.backlog == 0)
    }
}
