import AsyncHTTPClient
import Crypto
import Foundation
import LedgerTestSupport
import NIOCore
import NIOSSL
import Synchronization
import Testing

@testable import LedgerServer

/// The APNs provider against tools/apns-standin (a real HTTP/2-over-TLS server that verifies provider tokens
/// and answers as Apple documents): headers and payload as sent, the provider token reused and renewed by
/// Apple's rules, every kind of answer turned into its outcome, retries that stop at the push's expiry, new
/// connections after ExpiredProviderToken and GOAWAY, and many pushes at once through APNs' stream limit.
@Suite("APNs provider", .serialized, .timeLimit(.minutes(2)))
struct APNsClientTests {
    static let topic = "com.example.app"
    static let device = String(repeating: "a1", count: 32)

    static func push(
        device: String = device, expiresIn: Double = 3600, payload: String = #"{"aps":{"alert":"Storm at 14:00"}}"#
    ) -> APNsPush {
        APNsPush(
            deviceToken: device, pushType: "alert", priority: 10, expiresAt: Date().timeIntervalSince1970 + expiresIn,
            collapseID: "storm", apnsID: UUID(), payload: Array(payload.utf8))
    }

    /// A provider for the stand-in, signing with the team's key (or, `wrongTeam`, with another).
    static func client(
        _ standIn: APNsStandIn, wrongTeam: Bool = false,
        now: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }
    ) throws -> APNsClient {
        let key = wrongTeam ? P256.Signing.PrivateKey() : try standIn.teamKey()
        let token = APNsProviderToken(teamID: APNsStandIn.teamID, keyID: APNsStandIn.keyID, key: key, now: now)
        return APNsClient(
            endpoint: standIn.endpoint, topic: topic, providerToken: token,
            additionalTrustRoots: try NIOSSLCertificate.fromPEMFile(standIn.caFile),
            backoff: .init(initial: 0.05, maximum: 0.2, jitter: 0.2), logger: quietLogger)
    }

    @Test("an accepted push carries Apple's headers and the payload as given, under a token the stand-in verified")
    func accepted() async throws {
        try await APNsStandIn.run { standIn in
            let client = try Self.client(standIn)
            let push = Self.push()
            #expect(await client.send(push) == .accepted(apnsID: push.apnsID.uuidString))
            #expect(await client.send(Self.push()) != .expired(lastReason: ""))
            let record = try #require(try await standIn.requests().first)
            let headers = try #require(record["headers"] as? [String: String])
            #expect(record["status"] as? Int == 200 && record["token"] as? String == Self.device)
            #expect(headers["apns-topic"] == Self.topic && headers["apns-push-type"] == "alert")
            #expect(headers["apns-priority"] == "10" && headers["apns-collapse-id"] == "storm")
            #expect(headers["apns-id"] == push.apnsID.uuidString)
            #expect(headers["apns-expiration"] == String(Int64(push.expiresAt)))
            #expect(record["body"] as? String == #"{"aps":{"alert":"Storm at 14:00"}}"#)
            // One token for both pushes: reused, not minted per request.
            #expect(client.providerToken.mintedCount == 1)
            try await client.shutdown()
        }
    }

    @Test("410, BadDeviceToken, a payload too large and a wrong team key are final answers of their own kind")
    func finalAnswers() async throws {
        try await APNsStandIn.run { standIn in
            let client = try Self.client(standIn)
            let gone = String(repeating: "b2", count: 32)
            try await standIn.script(gone, [["status": 410, "reason": "Unregistered", "timestamp": 1_764_201_600_000]])
            #expect(await client.send(Self.push(device: gone)) == .unregistered(since: 1_764_201_600_000))
            #expect(await client.send(Self.push(device: "abc")) == .badDeviceToken(reason: "BadDeviceToken"))
            let notForTopic = String(repeating: "c3", count: 32)
            try await standIn.script(notForTopic, [["status": 400, "reason": "DeviceTokenNotForTopic"]])
            #expect(
                await client.send(Self.push(device: notForTopic)) == .badDeviceToken(reason: "DeviceTokenNotForTopic"))
            let large = #"{"aps":{"alert":""# + String(repeating: "x", count: 4100) + #""}}"#
            #expect(await client.send(Self.push(payload: large)) == .rejected(status: 413, reason: "PayloadTooLarge"))
            let wrongTeam = try Self.client(standIn, wrongTeam: true)
            #expect(await wrongTeam.send(Self.push()) == .providerTokenInvalid(reason: "InvalidProviderToken"))
            try await client.shutdown()
            try await wrongTeam.shutdown()
        }
    }

    @Test("429 TooManyRequests and 503 are retried until accepted; never past the push's expiry; a stop interrupts")
    func retries() async throws {
        try await APNsStandIn.run { standIn in
            let client = try Self.client(standIn)
            try await standIn.script(
                Self.device,
                [["status": 429, "reason": "TooManyRequests"], ["status": 503, "reason": "ServiceUnavailable"]])
            let push = Self.push()
            #expect(await client.send(push) == .accepted(apnsID: push.apnsID.uuidString))
            #expect(try await standIn.requests().map { $0["status"] as? Int } == [429, 503, 200])
            let down = String(repeating: "d4", count: 32)
            try await standIn.script(down, [["status": 503, "reason": "ServiceUnavailable"]], sticky: true)
            let started = Date()
            #expect(
                await client.send(Self.push(device: down, expiresIn: 1)) == .expired(lastReason: "ServiceUnavailable"))
            #expect(Date().timeIntervalSince(started) < 1.5)
            // A provider that stops (its task cancelled) while waiting to retry says so: the push is still owed.
            let waiting = Task { await client.send(Self.push(device: down, expiresIn: 60)) }
            try await Task.sleep(for: .milliseconds(300))
            waiting.cancel()
            #expect(await waiting.value == .interrupted)
            try await client.shutdown()
        }
    }

    @Test("ExpiredProviderToken: a new token at once, on a new connection; the old one answers nothing more")
    func expiredProviderToken() async throws {
        try await APNsStandIn.run { standIn in
            // The first token is minted with a clock an hour and more behind: APNs calls it expired.
            let calls = Mutex(0)
            let client = try Self.client(standIn) {
                let call = calls.withLock { count -> Int in
                    count += 1
                    return count
                }
                return Date().timeIntervalSince1970 - (call == 1 ? 3_700 : 0)
            }
            let push = Self.push()
            #expect(await client.send(push) == .accepted(apnsID: push.apnsID.uuidString))
            #expect(client.providerToken.mintedCount == 2)
            let requests = try await standIn.requests()
            #expect(requests.map { $0["reason"] as? String } == ["ExpiredProviderToken", nil])
            #expect(requests[0]["connection"] as? String != requests[1]["connection"] as? String)
            try await client.shutdown()
        }
    }

    @Test("many pushes at once go through a connection that allows one stream until a request has gone through")
    func manyAtOnce() async throws {
        try await APNsStandIn.run { standIn in
            let client = try Self.client(standIn)
            let outcomes = await withTaskGroup(of: APNsOutcome.self) { group in
                for index in 0..<64 {
                    group.addTask {
                        await client.send(Self.push(device: String(format: "%064x", index + 1)))
                    }
                }
                var outcomes: [APNsOutcome] = []
                for await outcome in group { outcomes.append(outcome) }
                return outcomes
            }
            #expect(outcomes.count == 64)
            #expect(outcomes.allSatisfy { if case .accepted = $0 { true } else { false } })
            #expect(Set(try await standIn.requests().compactMap { $0["token"] as? String }).count == 64)
            try await client.shutdown()
        }
    }

    @Test("after GOAWAY the next push goes out on a new connection")
    func goaway() async throws {
        try await APNsStandIn.run { standIn in
            let client = try Self.client(standIn)
            #expect(await client.send(Self.push()) != .expired(lastReason: ""))
            try await standIn.goaway()
            try await Task.sleep(for: .milliseconds(200))
            let push = Self.push()
            #expect(await client.send(push) == .accepted(apnsID: push.apnsID.uuidString))
            let connections = try await standIn.requests().compactMap { $0["connection"] as? String }
            #expect(connections.count == 2 && connections[0] != connections[1])
            try await client.shutdown()
        }
    }
}

/// tools/apns-standin/standin.py as a child process, with a test CA, a team key and free ports.
final class APNsStandIn: Sendable {
    static let teamID = "ABCDE12345"
    static let keyID = "KEY1234567"
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    let endpoint: String
    let control: String
    let caFile: String
    private let teamKeyPEM: String
    private let process: Process
    private let directory: TemporaryDirectory

    /// A fresh stand-in for `body`, stopped after it.
    static func run(_ body: (APNsStandIn) async throws -> Void) async throws {
        let standIn = try await APNsStandIn()
        defer { standIn.stop() }
        try await body(standIn)
    }

    func teamKey() throws -> P256.Signing.PrivateKey { try P256.Signing.PrivateKey(pemRepresentation: teamKeyPEM) }

    private init() async throws {
        directory = TemporaryDirectory("apns-standin")
        let made = try await runProcess(
            "/usr/bin/env",
            [
                "python3", "-c",
                "import sys; sys.path.insert(0, sys.argv[1]); from ledger_server import make_certificates; "
                    + "print(make_certificates(sys.argv[2], name='apns')['ca'])",
                Self.repository.appendingPathComponent("tools/sdk-conformance").path, directory.path,
            ])
        guard made.status == 0 else { throw StandInError("cannot make the test certificates: \(made.stderr)") }
        caFile = made.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let key = P256.Signing.PrivateKey()
        teamKeyPEM = key.pemRepresentation
        let publicKey = directory.path + "/team.pub.pem"
        try key.publicKey.pemRepresentation.write(toFile: publicKey, atomically: true, encoding: .utf8)
        let port = try freePort()
        let controlPort = try freePort()
        endpoint = "https://127.0.0.1:\(port)"
        control = "http://127.0.0.1:\(controlPort)"
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [
            "python3", Self.repository.appendingPathComponent("tools/apns-standin/standin.py").path,
            "--cert", directory.path + "/apns.pem", "--key", directory.path + "/apns.key", "--team-key", publicKey,
            "--team-id", Self.teamID, "--key-id", Self.keyID, "--topic", APNsClientTests.topic,
            "--port", String(port), "--control-port", String(controlPort), "--exit-with-parent",
        ]
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        let deadline = Date().addingTimeInterval(30)
        while true {
            if (try? await call("GET", "/healthz")) != nil { break }
            guard process.isRunning, Date() < deadline else {
                throw StandInError("the APNs stand-in did not start (python3 needs h2 and cryptography)")
            }
            try await Task.sleep(for: .milliseconds(100))
        }
    }

    func stop() {
        // SIGKILL: this test process may ignore SIGTERM (swift-service-lifecycle traps it), and so would its child.
        kill(process.processIdentifier, SIGKILL)
        directory.remove()
    }

    /// The requests recorded so far, oldest first.
    func requests() async throws -> [[String: Any]] {
        try JSONSerialization.jsonObject(with: try await call("GET", "/requests")) as? [[String: Any]] ?? []
    }

    func script(_ token: String, _ replies: [[String: Any]], sticky: Bool = false) async throws {
        let body = try JSONSerialization.data(withJSONObject: ["token": token, "replies": replies, "sticky": sticky])
        _ = try await call("POST", "/script", body: body)
    }

    func goaway() async throws { _ = try await call("POST", "/goaway", body: Data("{}".utf8)) }

    private func call(_ method: String, _ path: String, body: Data? = nil) async throws -> Data {
        var request = HTTPClientRequest(url: control + path)
        request.method = .init(rawValue: method)
        if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        guard response.status == .ok else { throw StandInError("\(method) \(path): \(response.status)") }
        return Data(buffer: try await response.body.collect(upTo: 16 << 20))
    }
}

struct StandInError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A TCP port nothing listens on now (bound to 0, then released).
func freePort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw StandInError("socket: errno \(errno)") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
        }
    }
    guard bound else { throw StandInError("bind: errno \(errno)") }
    return Int(UInt16(bigEndian: address.sin_port))
}
