import Foundation
import LedgerCore
import LedgerTestSupport
import NIOCore
import Synchronization
import Testing

@testable import LedgerServer
import FCMWire
import LedgerQueries

/// The hardening pieces below the process-level tests in tools/ (test_hardening.py,
/// test_console_hardening.py): console sessions kept per project, the sign-in throttle's refund and its client
/// networks, one secret in one place of the config, TTLs to the nanosecond, CSV cells.
@Suite("Hardening")
struct HardeningTests {
    /// A clock the tests move by hand.
    final class ManualClock: Sendable {
        private let offset = Mutex(Duration.zero)
        let start = ContinuousClock.now
        var now: ContinuousClock.Instant { start + offset.withLock { $0 } }
        func advance(_ by: Duration) { offset.withLock { $0 += by } }
    }

    static let alpha = try! ProjectID("alpha")
    static let beta = try! ProjectID("beta")

    @Test("sessions are capped per project: one project's sign-ins end its own oldest sessions, never another's")
    func sessionsPerProject() {
        let sessions = ConsoleSessions(maximumPerProject: 3)
        let alpha = sessions.open(project: Self.alpha, role: .auditor)
        let betas = (0..<10).map { _ in sessions.open(project: Self.beta, role: .auditor) }
        #expect(sessions.session(alpha)?.project == Self.alpha)
        #expect(sessions.count(of: Self.beta) == 3 && sessions.count(of: Self.alpha) == 1)
        // The three newest of beta's remain, in opening order.
        #expect(betas.map { sessions.session($0) != nil } == Array(repeating: false, count: 7) + [true, true, true])
    }

    @Test("expired sessions are gone, and are dropped from the front at the next sign-in")
    func expiry() {
        let clock = ManualClock()
        let sessions = ConsoleSessions(maximumPerProject: 100, now: { clock.now })
        let early = (0..<5).map { _ in sessions.open(project: Self.alpha, role: .admin) }
        clock.advance(.seconds(3600))
        let late = sessions.open(project: Self.alpha, role: .admin)
        clock.advance(ConsoleSessions.lifetime - .seconds(3600))
        #expect(early.allSatisfy { sessions.session($0) == nil })
        #expect(sessions.session(late)?.role == .admin)
        _ = sessions.open(project: Self.alpha, role: .auditor)
        #expect(sessions.count(of: Self.alpha) == 2)
        clock.advance(.seconds(3600))
        #expect(sessions.session(late) == nil)
    }

    @Test("signed-out sessions do not count, and a long run of sign-ins and sign-outs keeps the cap exact")
    func signOutChurn() {
        let sessions = ConsoleSessions(maximumPerProject: 50)
        var live: [String] = []
        var generator = SeededGenerator(seed: 42)
        for round in 0..<20_000 {
            if !live.isEmpty && generator.next() % 3 == 0 {
                let index = Int(generator.next() % UInt64(live.count))
                sessions.close(live.remove(at: index))
            } else {
                live.append(sessions.open(project: Self.alpha, role: .auditor))
                if live.count > 50 { live.removeFirst() }  // the oldest live one is the one evicted
            }
            if round % 997 == 0 {
                #expect(sessions.count(of: Self.alpha) == live.count)
                #expect(live.allSatisfy { sessions.session($0) != nil })
            }
        }
        #expect(sessions.count(of: Self.alpha) == live.count)
        #expect(sessions.queuedIDs(of: Self.alpha) <= 2 * max(live.count, 64) + 1)
    }

    @Test("the throttle takes first and gives back: wrong keys use up the burst, refunds restore it")
    func throttleRefund() {
        let time = Mutex(0.0)
        let limiter = RateLimiter<ClientNetwork>(rate: 5.0 / 60, capacity: 5, now: { time.withLock { $0 } })
        let client = ClientNetwork(try! SocketAddress(ipAddress: "192.0.2.1", port: 1))
        for _ in 0..<5 { #expect(limiter.take(1, for: client) == 1) }
        #expect(limiter.take(1, for: client) == 0)
        #expect(limiter.retryAfter(for: client) == 12)
        limiter.refund(1, for: client)
        #expect(limiter.take(1, for: client) == 1)
        time.withLock { $0 += 12 }
        #expect(limiter.take(1, for: client) == 1 && limiter.take(1, for: client) == 0)
        // Refunds never raise a bucket past its burst.
        let other = ClientNetwork(try! SocketAddress(ipAddress: "192.0.2.2", port: 1))
        #expect(limiter.take(1, for: other) == 1)
        limiter.refund(10, for: other)
        #expect((0..<6).map { _ in limiter.take(1, for: other) } == [1, 1, 1, 1, 1, 0])
    }

    @Test("client networks: a whole IPv4 address, an IPv6 /64, a mapped IPv4 as itself")
    func clientNetworks() throws {
        func network(_ address: String) throws -> ClientNetwork {
            ClientNetwork(try SocketAddress(ipAddress: address, port: 443))
        }
        #expect(try network("192.0.2.1") != network("192.0.2.2"))
        #expect(try network("2001:db8:1:2::1") == network("2001:db8:1:2:ffff::9"))
        #expect(try network("2001:db8:1:2::1") != network("2001:db8:1:3::1"))
        #expect(try network("::ffff:192.0.2.1") == network("192.0.2.1"))
        #expect(ClientNetwork(nil) == ClientNetwork(nil))
    }

    @Test("one secret named in two places of the config is refused, naming both; twice in one list is one key")
    func oneSecretOneRole() throws {
        let path = TemporaryDirectory("config").path + "/config.json"
        let shared = "sha256:" + String(repeating: "ab", count: 32)
        let other = "sha256:" + String(repeating: "cd", count: 32)
        func load(_ projects: String) throws -> ServerConfiguration {
            try Data(#"{"projects": \#(projects)}"#.utf8).write(to: URL(fileURLWithPath: path))
            return try ServerConfiguration.load(path: path)
        }
        let cases = [
            (
                #"{"p": {"adminKeys": ["\#(shared)"], "clientApiKeys": ["\#(shared)"]}}"#,
                "projects.p.adminKeys and projects.p.clientApiKeys"
            ),
            (
                #"{"p": {"adminKeys": ["\#(shared)"], "auditorKeys": ["\#(shared)"]}}"#,
                "projects.p.adminKeys and projects.p.auditorKeys"
            ),
            (
                #"{"q": {"auditorKeys": ["\#(shared)"]}, "p": {"auditorKeys": ["\#(shared)"]}}"#,
                "projects.p.auditorKeys and projects.q.auditorKeys"
            ),
        ]
        for (projects, places) in cases {
            #expect {
                try load(projects)
            } throws: { error in
                (error as? LedgerCoreError)?.field?.hasSuffix(places) == true
            }
        }
        let configuration = try load(
            #"{"p": {"adminKeys": ["\#(shared)", "\#(shared)"], "auditorKeys": ["\#(other)"]}}"#)
        #expect(configuration.credentials.projects == [try ProjectID("p")])
    }

    @Test("a duration's digits past the microsecond count against the 4-week bound")
    func durationBound() {
        let cases: [(String, Int64?)] = [
            ("2419200s", 2_419_200_000_000), ("2419200.000000000s", 2_419_200_000_000),
            ("2419200.000000001s", nil), ("2419200.0000001s", nil), ("2419200.000001s", nil),
            ("2419199.999999999s", 2_419_199_999_999), ("0.0000009s", 0), ("3.5s", 3_500_000),
            ("2419201s", nil), ("1.0000000000s", nil),
        ]
        for (text, expected) in cases {
            #expect(MessageLifetimeBounds.microseconds(ofDuration: text) == expected, "\(text)")
        }
    }

    @Test("CSV cells that a spreadsheet would run are quoted behind a ', and quoting keeps every other cell whole")
    func csvCells() {
        #expect(CSVCell.encode("plain:APA91bY") == "plain:APA91bY")
        for start in ["=", "+", "-", "@", "\t", "\r"] {
            #expect(CSVCell.encode(start + "1+1") == "\"'" + start + "1+1\"")
        }
        #expect(CSVCell.encode("-say \"hi\"") == "\"'-say \"\"hi\"\"\"")
        #expect(CSVCell.encode("a,b") == "\"a,b\"" && CSVCell.encode("a\nb") == "\"a\nb\"")
        #expect(CSVCell.encode("") == "")
    }
}
