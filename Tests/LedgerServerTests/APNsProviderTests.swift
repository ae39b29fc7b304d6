import Foundation
import LedgerCore
import LedgerTestSupport
import Synchronization
import Testing

@testable import LedgerServer

/// The APNs provider's pure parts in the server: the window that turns out-of-order outcomes into recorded
/// progress, and the apns-id. The wire's rules are APNsWireTests'; pushing itself is tested through `ledger serve`
/// against the stand-in (IntegrationTests/apns-standin/test_ledger_apns.py).
@Suite("APNs push window")
struct APNsProviderTests {
    @Test("the window passes a recipient only when it and every one before it has an outcome, in any order")
    func window() {
        var window = PushWindow()
        let tokens = (1...6).map { try! RegistrationToken("t\($0)") }
        window.take(1, token: tokens[0])
        window.take(2, token: tokens[1], done: true)  // no APNs token: passed as soon as 1 is
        window.take(4, token: tokens[3])
        window.take(6, token: tokens[5])
        #expect(window.through == nil && window.open == 4)
        window.finish(4)
        #expect(window.through == nil)
        window.finish(1)
        #expect(window.through?.instance == 4 && window.through?.token == tokens[3])
        #expect(window.open == 1)
        window.finish(6)
        #expect(window.through?.instance == 6 && window.open == 0)
        // Thousands passed: the window keeps only what is open.
        var large = PushWindow()
        for id in InstanceID(1)...10_000 { large.take(id, token: tokens[0]) }
        for id in (InstanceID(1)...10_000).reversed() where id > 1 { large.finish(id) }
        #expect(large.through == nil && large.open == 10_000)
        large.finish(1)
        #expect(large.through?.instance == 10_000 && large.open == 0)
    }

    @Test("the apns-id is a version 8 UUID of the message and the device, the same every time")
    func pushID() throws {
        let token = try RegistrationToken("device-token")
        let id = APNsPushID.string(messageID: 1_795_000_000_000_000_123, token: token)
        #expect(id == APNsPushID.string(messageID: 1_795_000_000_000_000_123, token: token))
        #expect(id != APNsPushID.string(messageID: 1_795_000_000_000_000_124, token: token))
        #expect(id.count == 36 && id == id.lowercased())
        let characters = Array(id)
        #expect(characters[14] == "8" && "89ab".contains(characters[19]))
    }

    @Test("a broadcast's apns-request-id is scoped by the project and the send's seq, the same on every attempt")
    func broadcastRequestID() throws {
        let shop = try ProjectID("shop")
        let messageID: UInt64 = 1_795_000_000_000_000_123
        let id = APNsPushID.broadcastUUID(project: shop, seq: 42, messageID: messageID)
        #expect(id == APNsPushID.broadcastUUID(project: shop, seq: 42, messageID: messageID))
        // The same message id in another project (message ids come from the clock, per project), or at another seq
        // (another server's log), is another request; so is another message.
        #expect(id != APNsPushID.broadcastUUID(project: try ProjectID("shop-staging"), seq: 42, messageID: messageID))
        #expect(id != APNsPushID.broadcastUUID(project: shop, seq: 43, messageID: messageID))
        #expect(id != APNsPushID.broadcastUUID(project: shop, seq: 42, messageID: messageID + 1))
        let text = id.uuidString.lowercased()
        let characters = Array(text)
        #expect(characters[14] == "8" && "89ab".contains(characters[19]))
    }
}

/// The pusher's wake-up: a commit's signal wakes it, one kept signal wakes the next wait, and a wait that was woken
/// leaves nothing behind (a leftover signal woke every following wait at once: a busy loop).
@Suite("Wake signal", .timeLimit(.minutes(1)))
struct WakeSignalTests {
    /// Whether `wait` is still waiting after `delay`.
    static func stillWaiting(_ signal: WakeSignal, after delay: Duration) async -> Bool {
        let returned = Mutex(false)
        let waiting = Task {
            await signal.wait(upTo: .seconds(30))
            returned.withLock { $0 = true }
        }
        try? await Task.sleep(for: delay)
        let still = !returned.withLock { $0 }
        waiting.cancel()
        await waiting.value
        return still
    }

    @Test("a signal wakes the waiter; a signal with nobody waiting wakes the next wait; then waits wait again")
    func wakes() async {
        let signal = WakeSignal()
        let woken = Task { await signal.wait(upTo: .seconds(30)) }
        try? await Task.sleep(for: .milliseconds(50))
        signal.signal()
        await woken.value  // the time limit fails the test if the signal is lost
        signal.signal()
        signal.signal()
        await signal.wait(upTo: .seconds(30))  // one kept signal, however many came
        #expect(await Self.stillWaiting(signal, after: .milliseconds(300)))
    }

    @Test("a wait that timed out or was cancelled leaves no signal behind")
    func nothingLeftBehind() async {
        let signal = WakeSignal()
        await signal.wait(upTo: .milliseconds(20))
        // The timeout's own signal woke the wait it belonged to; the next waits.
        #expect(await Self.stillWaiting(signal, after: .milliseconds(300)))
        #expect(await Self.stillWaiting(signal, after: .milliseconds(300)))
    }
}
