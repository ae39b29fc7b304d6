// On Linux, `stat` and its fields are declared by the C module under Dispatch, which MemberImportVisibility
// asks to be imported by name.
#if canImport(CDispatch)
    import CDispatch
#endif
import Foundation
import Testing

@testable import TopicLedgerMessaging

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

@Suite("Cancelling a request")
struct CancellationTests {
    /// With FoundationNetworking's own `URLSession.data(for:)` this crashed ("Trying to access a behaviour for a
    /// task that in not in the registry") or deadlocked within the 150 rounds, every run (it was 400; 150 still
    /// fails the old code, and keeps this test from crowding the messaging tests that run beside it).
    @Test(
        "cancelling a task whose request is answering at that moment never deadlocks or crashes (swift-corelibs-foundation#5412)"
    )
    func cancelWhileAnswering() async throws {
        try await LibraryServer().run { admin in
            let session = URLSession(configuration: .ephemeral)
            // Not invalidateAndCancel: cancelling a URLSessionTask as it completes is the crash this avoids.
            defer { session.finishTasksAndInvalidate() }
            let request = URLRequest(url: URL(string: "http://127.0.0.1:\(admin.port)/healthz")!)
            var generator = SystemRandomNumberGenerator()
            for round in 0..<150 {
                let call = Task { try await ServerAPI.data(for: request, in: session) }
                try await Task.sleep(for: .microseconds(Int.random(in: 0...2_000, using: &generator)))
                // Cancelled from a thread of its own, so that a deadlock fails the test instead of hanging it.
                let cancelled = DispatchSemaphore(value: 0)
                DispatchQueue.global().async {
                    call.cancel()
                    cancelled.signal()
                }
                guard cancelled.wait(timeout: .now() + 10) == .success else {
                    Issue.record("round \(round): cancelling the request's task did not return within 10 s")
                    return
                }
                // Answered or cancelled; either way it ends.
                _ = await call.result
            }
            // On Linux a cancelled call's request finishes on its own: wait for them, so that none is left on
            // FoundationNetworking's work queue, which every session of the process shares, for other tests.
            #expect(
                await eventually {
                    await withCheckedContinuation { done in session.getAllTasks { done.resume(returning: $0.isEmpty) } }
                })
        }
    }
}
