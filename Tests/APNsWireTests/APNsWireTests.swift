import Crypto
import Foundation
import LedgerTestSupport
import Synchronization
import Testing

@testable import APNsWire

/// The APNs wire's pure parts: the provider token's rules (Apple's 50-minute reuse, 20-minute floor, the token
/// kept across restarts) and every documented reply mapped to what the provider does. Pushing itself is tested
/// through `ledger serve` against the stand-in (IntegrationTests/apns-standin/test_ledger_apns.py) and nghttpd.
@Suite("APNs provider")
struct APNsWireTests {
    /// A clock tests move by hand.
    final class Clock: Sendable {
        private let value = Mutex(1_800_000_000.0)
        var now: Double { value.withLock { $0 } }
        func advance(_ seconds: Double) { value.withLock { $0 += seconds } }
    }

    static func claims(of jwt: String) throws -> [String: Any] {
        let data = try #require(Data(base64URL: String(jwt.split(separator: ".")[1])))
        let object = try JSONSerialization.jsonObject(with: data)
        return try #require(object as? [String: Any])
    }

    @Test(
        "the token verifies with the team's public key, is reused for 50 minutes, then renewed; ExpiredProviderToken renews at once"
    )
    func reuseAndRenewal() throws {
        let raw = P256.Signing.PrivateKey().rawRepresentation
        let publicKey = try P256.Signing.PrivateKey(rawRepresentation: raw).publicKey
        let clock = Clock()
        let provider = APNsProviderToken(
            teamID: "ABCDE12345", keyID: "KEY1234567", key: try P256.Signing.PrivateKey(rawRepresentation: raw),
            now: { clock.now })
        let first = try provider.current()
        let parts = first.split(separator: ".").map(String.init)
        #expect(parts.count == 3)
        let signature = try P256.Signing.ECDSASignature(
            rawRepresentation: try #require(Data(base64URL: parts[2])))
        #expect(publicKey.isValidSignature(signature, for: Data("\(parts[0]).\(parts[1])".utf8)))
        #expect(try Self.claims(of: first)["iss"] as? String == "ABCDE12345")
        #expect(try Self.claims(of: first)["iat"] as? Int == Int(clock.now))
        clock.advance(49 * 60)
        #expect(try provider.current() == first)
        clock.advance(61)
        let second = try provider.current()
        #expect(second != first && provider.mintedCount == 2)
        // APNs called the second expired: the next one is minted at once, under 20 minutes after it.
        provider.dropExpired(second)
        clock.advance(5)
        let third = try provider.current()
        #expect(third != second && provider.mintedCount == 3)
        // A stale report (of a token already replaced) changes nothing.
        provider.dropExpired(second)
        #expect(try provider.current() == third)
    }

    @Test(
        "a kept token is used again after a restart while under 50 minutes old and signed by the same key, never otherwise"
    )
    func keptAcrossRestarts() throws {
        let directory = TemporaryDirectory("apns-token")
        defer { directory.remove() }
        let store = directory.path + "/apns-provider-token.json"
        let raw = P256.Signing.PrivateKey().rawRepresentation
        func key() -> P256.Signing.PrivateKey { try! P256.Signing.PrivateKey(rawRepresentation: raw) }
        let clock = Clock()
        let first = try APNsProviderToken(
            teamID: "ABCDE12345", keyID: "KEY1234567", key: key(), store: store, now: { clock.now }
        ).current()
        var status = stat()
        #expect(stat(store, &status) == 0 && status.st_mode & 0o077 == 0)
        clock.advance(10 * 60)
        let restarted = APNsProviderToken(
            teamID: "ABCDE12345", keyID: "KEY1234567", key: key(),
            store: store, now: { clock.now })
        #expect(try restarted.current() == first && restarted.mintedCount == 0)
        // Another key (a rotated one), another key id, or a token 50 minutes old: a new token.
        let rotated = APNsProviderToken(
            teamID: "ABCDE12345", keyID: "KEY1234567", key: P256.Signing.PrivateKey(), store: store, now: { clock.now })
        #expect(try rotated.current() != first)
        let otherID = APNsProviderToken(
            teamID: "ABCDE12345", keyID: "KEY7654321", key: key(), store: store, now: { clock.now })
        #expect(try otherID.current() != first)
        clock.advance(50 * 60)
        let late = APNsProviderToken(
            teamID: "ABCDE12345", keyID: "KEY7654321", key: key(), store: store, now: { clock.now })
        #expect(late.mintedCount == 0)
        _ = try late.current()
        #expect(late.mintedCount == 1)
        // A damaged file is no token.
        try Data("{not json".utf8).write(to: URL(fileURLWithPath: store))
        let damaged = APNsProviderToken(
            teamID: "ABCDE12345", keyID: "KEY1234567", key: key(), store: store, now: { clock.now })
        _ = try damaged.current()
        #expect(damaged.mintedCount == 1)
    }

    @Test("a channel request that cannot connect never reached Apple: NoAnswer says it did not arrive")
    func channelRequestWithoutConnection() async throws {
        // Nothing listens on port 1 of the loopback: the connection is refused.
        let client = try APNsChannelClient(
            channelEndpoint: "https://127.0.0.1:1", broadcastEndpoint: "https://127.0.0.1:1",
            bundleID: "com.example.app",
            providerToken: APNsProviderToken(teamID: "ABCDE12345", keyID: "KEY1234567", key: P256.Signing.PrivateKey()))
        do {
            _ = try await client.createChannel(messageStoragePolicy: 0)
            Issue.record("a refused connection answered")
        } catch let error as APNsChannelClient.NoAnswer {
            #expect(!error.mayHaveArrived, "\(error)")
        }
        await client.shutdown()
    }

    @Test("every documented APNs answer maps to what the provider does")
    func replies() {
        func action(_ status: Int, _ body: String = "") -> APNsReply.Action {
            APNsReply(status: status, body: Array(body.utf8)).action
        }
        #expect(action(200) == .done(.accepted(apnsID: "")))
        #expect(
            action(410, #"{"reason":"Unregistered","timestamp":1764201600000}"#)
                == .done(.unregistered(since: 1_764_201_600_000)))
        #expect(action(410, #"{"reason":"ExpiredToken"}"#) == .done(.unregistered(since: nil)))
        #expect(action(400, #"{"reason":"BadDeviceToken"}"#) == .done(.badDeviceToken(reason: "BadDeviceToken")))
        #expect(
            action(400, #"{"reason":"DeviceTokenNotForTopic"}"#)
                == .done(.badDeviceToken(reason: "DeviceTokenNotForTopic")))
        #expect(action(400, #"{"reason":"BadTopic"}"#) == .done(.rejected(status: 400, reason: "BadTopic")))
        #expect(
            action(413, #"{"reason":"PayloadTooLarge"}"#) == .done(.rejected(status: 413, reason: "PayloadTooLarge")))
        #expect(action(403, #"{"reason":"ExpiredProviderToken"}"#) == .renewProviderToken)
        #expect(
            action(403, #"{"reason":"InvalidProviderToken"}"#)
                == .done(.providerTokenInvalid(reason: "InvalidProviderToken")))
        #expect(
            action(403, #"{"reason":"MissingProviderToken"}"#)
                == .done(.providerTokenInvalid(reason: "MissingProviderToken")))
        #expect(action(403, #"{"reason":"Forbidden"}"#) == .done(.rejected(status: 403, reason: "Forbidden")))
        #expect(action(429, #"{"reason":"TooManyProviderTokenUpdates"}"#) == .reconnectLater)
        #expect(action(429, #"{"reason":"TooManyRequests"}"#) == .retry(reason: "TooManyRequests"))
        #expect(action(500, #"{"reason":"InternalServerError"}"#) == .retry(reason: "InternalServerError"))
        #expect(action(503, #"{"reason":"ServiceUnavailable"}"#) == .retry(reason: "ServiceUnavailable"))
        // A body that is not APNs' JSON still maps by status.
        #expect(action(503, "<html>") == .retry(reason: "HTTP 503"))
        #expect(action(404) == .done(.rejected(status: 404, reason: "HTTP 404")))
    }
}

extension Data {
    fileprivate init?(base64URL text: String) {
        let padded =
            text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            + String(repeating: "=", count: (4 - text.count % 4) % 4)
        self.init(base64Encoded: padded)
    }
}
