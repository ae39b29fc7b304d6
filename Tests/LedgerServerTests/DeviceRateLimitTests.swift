import Foundation
import HTTPTypes
import LedgerCore
import LedgerServer
import LedgerStore
import LedgerTestSupport
import Testing

/// The log cannot be grown without limit by a device: no-ops append nothing, a batch counts a token once,
/// and registrations, a device's own subscription changes and its acknowledgements have rate limits.
@Suite("Bounded growth")
struct DeviceRateLimitTests {
    @Test("requests that change nothing append nothing; a token repeated in a batch is one change")
    func noOpsAppendNothing() async throws {
        try await TestServer().run { client in
            let device = try await client.registerDevice()
            let path = "/v1/projects/demo-project/registrations/\(device)/topicSubscriptions"
            let before = try await client.headSeq()
            for _ in 0..<5 {
                let missing = try await client.call(
                    .delete, path + "/nosuchtopic?allowMissing=true", headers: TestServer.Client.device)
                #expect(missing.status == .ok)
            }
            #expect(try await client.headSeq() == before)
            let repeated = Array(repeating: "\"\(device)\"", count: 1000).joined(separator: ",")
            let batch = try await client.call(
                .post, "/iid/v1:batchAdd", body: #"{"to":"/topics/news","registration_tokens":[\#(repeated)]}"#)
            #expect(batch.status == .ok)
            #expect((batch.json["results"] as? [[String: String]])?.count == 1000)
            #expect(try await client.headSeq() == before + 1)
            let again = try await client.call(
                .post, "/iid/v1:batchAdd", body: #"{"to":"/topics/news","registration_tokens":["\#(device)"]}"#)
            #expect(again.status == .ok)
            #expect(try await client.headSeq() == before + 1)
        }
    }

    @Test("registrations, a device's subscription changes and its acknowledgements are rate-limited with Retry-After")
    func perDeviceLimits() async throws {
        let clock = ManualClock()
        try await TestServer {
            $0.rateClock = { clock.now }
            $0.registrationsPerSecond = 3
            $0.deviceSubscriptionChangesPerMinute = 2
            $0.deviceAcknowledgementsPerMinute = 1
        }.run { client in
            var devices: [String] = []
            for _ in 0..<3 { devices.append(try await client.registerDevice()) }
            let before = try await client.headSeq()
            let fourth = try await client.call(
                .post, "/v1/projects/demo-project/registrations", headers: TestServer.Client.device, body: "{}")
            #expect(fourth.status == .tooManyRequests)
            #expect(fourth.errorCode == "RESOURCE_EXHAUSTED")
            #expect(fourth.headers[.retryAfter] == "1")
            #expect(try await client.headSeq() == before)
            clock.advance(1)
            devices.append(try await client.registerDevice())

            let device = devices[0]
            let path = "/v1/projects/demo-project/registrations/\(device)/topicSubscriptions"
            for topic in ["a", "b"] {
                let ok = try await client.call(
                    .post, path + "?topicName=\(topic)", headers: TestServer.Client.device, body: "{}")
                #expect(ok.status == .ok)
            }
            let third = try await client.call(
                .post, path + "?topicName=c", headers: TestServer.Client.device, body: "{}")
            #expect(third.status == .tooManyRequests)
            #expect(Int(third.headers[.retryAfter] ?? "") == 30)
            // Another device, and the admin acting for this one, have budgets of their own.
            let other = try await client.call(
                .post, "/v1/projects/demo-project/registrations/\(devices[1])/topicSubscriptions?topicName=c",
                headers: TestServer.Client.device, body: "{}")
            #expect(other.status == .ok)
            let admin = try await client.call(.post, path + "?topicName=c", body: "{}")
            #expect(admin.status == .ok)
            clock.advance(30)
            let later = try await client.call(
                .delete, path + "/a", headers: TestServer.Client.device)
            #expect(later.status == .ok)

            _ = try await client.call(
                .post, "/v1/projects/demo-project/messages:send", body: #"{"message":{"token":"\#(device)"}}"#)
            let cursor = String(try await client.headSeq())
            let ackPath = "/v1/projects/demo-project/registrations/\(device)/messages:ack"
            let ack = try await client.call(
                .post, ackPath, headers: TestServer.Client.device, body: #"{"through":"\#(cursor)"}"#)
            #expect(ack.status == .ok)
            let second = try await client.call(
                .post, ackPath, headers: TestServer.Client.device, body: #"{"through":"\#(cursor)"}"#)
            #expect(second.status == .tooManyRequests)
            #expect(second.headers[.retryAfter] == "60")
        }
    }
}
