import Foundation
import HTTPTypes
import LedgerCore
import LedgerServer
import LedgerStore
import LedgerTestSupport
import Testing

/// Numbers from requests and from stored events never trap: each of these killed the server before.
@Suite("Untrusted numbers")
struct UntrustedNumberTests {
    typealias Delivery = DeliveryTests

    @Test("a cursor of UInt64.max (poll `after`, SSE Last-Event-ID) is a 400 field violation, not a crash")
    func hugeCursor() async throws {
        try await TestServer().run { client in
            let device = try await client.registerDevice()
            for after in ["18446744073709551615", "18446744073709551616", "-1", "1e3", " 1", "99"] {
                let reply = try await Delivery.poll(client, device, query: "?after=\(after)")
                #expect(reply.status == .badRequest, "after=\(after)")
                #expect(reply.fieldViolations.first?["field"] == "after")
            }
            var headers = TestServer.Client.device
            headers[HTTPField.Name("Last-Event-ID")!] = "18446744073709551615"
            let stream = try await client.call(
                .get, Delivery.registrations(device) + "/messages:stream", headers: headers)
            #expect(stream.status == .badRequest)
            #expect(stream.fieldViolations.first?["field"] == "Last-Event-ID")
            // The server is still there.
            #expect(try await Delivery.poll(client, device).status == .ok)
        }
    }

    @Test("TTLs FCM refuses get a 400 field violation and append nothing")
    func refusedLifetimes() async throws {
        try await TestServer().run { client in
            let device = try await client.registerDevice()
            let before = try await client.headSeq()
            let cases: [(String, String)] = [
                (#"{"android":{"ttl":"99999999999999999999s"}}"#, "message.android.ttl"),
                (#"{"android":{"ttl":"1e300s"}}"#, "message.android.ttl"),
                (#"{"android":{"ttl":"infs"}}"#, "message.android.ttl"),
                (#"{"android":{"ttl":"9300000000000s"}}"#, "message.android.ttl"),
                (#"{"android":{"ttl":"2419201s"}}"#, "message.android.ttl"),
                (#"{"android":{"ttl":"-1s"}}"#, "message.android.ttl"),
                (#"{"android":{"ttl":3600}}"#, "message.android.ttl"),
                (
                    #"{"apns":{"headers":{"apns-expiration":"-9223372036854775808"}}}"#,
                    "message.apns.headers.apns-expiration"
                ),
                (#"{"apns":{"headers":{"apns-priority":7}}}"#, "message.apns.headers.apns-priority"),
                (#"{"apns":{"headers":"x"}}"#, "message.apns.headers"),
                (#"{"apns":{"payload":"x"}}"#, "message.apns.payload"),
            ]
            for (platform, field) in cases {
                let body = String(platform.dropFirst().dropLast())
                let reply = try await client.call(
                    .post, Delivery.send, body: #"{"message":{"token":"\#(device)",\#(body)}}"#)
                #expect(reply.status == .badRequest, "\(platform)")
                #expect(reply.fieldViolations.first?["field"] == field, "\(platform)")
            }
            #expect(try await client.headSeq() == before)
            // Within FCM's bounds they are accepted.
            for platform in [
                #""android":{"ttl":"2419200s"}"#, #""android":{"ttl":"3.5s"}"#,
                #""apns":{"headers":{"apns-expiration":"99999999999999"}}"#,
            ] {
                let reply = try await client.call(
                    .post, Delivery.send, body: #"{"message":{"token":"\#(device)",\#(platform)}}"#)
                #expect(reply.status == .ok, "\(platform): \(reply.text)")
            }
            #expect(try await Delivery.poll(client, device).status == .ok)
        }
    }

    @Test("stored messages with lifetimes out of any range are read without trapping (no crash loop)")
    func storedLifetimes() async throws {
        try await TestServer().run { client in
            let device = try await client.registerDevice()
            let ledger = try await client.ledgers.ledger(for: .default)
            // What an older server stored before validation refused them: appended straight to the store.
            let messages = [
                #"{"android":{"ttl":"99999999999999999999s"}}"#, #"{"android":{"ttl":"1e300s"}}"#,
                #"{"android":{"ttl":"infs"}}"#, #"{"android":{"ttl":"9300000000000s"}}"#,
                #"{"apns":{"headers":{"apns-expiration":"99999999999999"}}}"#,
                #"{"apns":{"headers":{"apns-expiration":"-9223372036854775808"}}}"#,
            ]
            let token = try RegistrationToken(device)
            _ = try await ledger.append(
                WriteRequest(
                    actor: "admin", requestID: "old",
                    operations: messages.map {
                        .send(.token(token), precedence: .leftToRight, messageJSON: Array($0.utf8))
                    }))
            ledger.waitForAudiences()
            let reply = try await Delivery.poll(client, device)
            #expect(reply.status == .ok)
            // The huge TTLs are clamped to 4 weeks (delivered now); a negative expiry has passed.
            #expect(Delivery.ids(reply).count == 5)
        }
    }

    @Test("registration needs a body; platform is ios, android or web")
    func registrationBody() async throws {
        try await TestServer().run { client in
            let before = try await client.headSeq()
            for body in [nil, "", #"{"platform":"windows"}"#, #"{"platform":7}"#] {
                let reply = try await client.call(
                    .post, "/v1/projects/demo-project/registrations", headers: TestServer.Client.device, body: body)
                #expect(reply.status == .badRequest, "\(body ?? "no body")")
                #expect(reply.googleStatus == "INVALID_ARGUMENT")
            }
            #expect(try await client.headSeq() == before)
            for platform in ["ios", "android", "web", "IOS"] {
                _ = try await client.registerDevice(platform: platform)
            }
        }
    }
}
