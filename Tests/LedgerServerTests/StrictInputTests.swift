import Foundation
import HTTPTypes
import LedgerCore
import LedgerServer
import LedgerStore
import LedgerTestSupport
import Testing

/// Input a lax parser would take: BOMs, UTF-16, duplicate keys, impossible dates, credentials in the wrong
/// header. Each is a clear 400 (or 401) that changes nothing.
@Suite("Strict input")
struct StrictInputTests {
    static let send = "/v1/projects/demo-project/messages:send"

    @Test("bodies must be UTF-8 without a BOM, with each key once per object")
    func strictBodies() async throws {
        try await TestServer().run { client in
            let device = try await client.registerDevice()
            let before = try await client.headSeq()
            let good = #"{"message":{"token":"\#(device)"}}"#
            let utf16 = String(
                decoding: Array(good.utf16).flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] }, as: UTF8.self)
            let bodies = [
                "\u{FEFF}" + good,
                utf16,
                #"{"message":{"token":"\#(device)"},"message":{"topic":"news"}}"#,
                #"{"message":{"token":"\#(device)","data":{"k":"1","\u006b":"2"}}}"#,
            ]
            for body in bodies {
                let reply = try await client.call(.post, Self.send, body: body)
                #expect(reply.status == .badRequest, "\(body.prefix(40))")
                #expect(reply.googleStatus == "INVALID_ARGUMENT")
            }
            // The same key in different objects is fine.
            let nested = try await client.call(
                .post, Self.send, body: #"{"message":{"token":"\#(device)","data":{"message":"x"}}}"#)
            #expect(nested.status == .ok, "\(nested.text)")
            #expect(try await client.headSeq() == before + 2)  // the send and its audience
        }
    }

    @Test(
        "send bodies are RFC 8259: trailing commas, lone surrogates and nesting past 512 are 400; 512 levels are sent")
    func rfc8259Bodies() async throws {
        try await TestServer().run { client in
            let device = try await client.registerDevice()
            let before = try await client.headSeq()
            func nested(_ depth: Int) -> String {
                String(repeating: #"{"k":"#, count: depth) + "1" + String(repeating: "}", count: depth)
            }
            let refused = [
                #"{"message":{"token":"\#(device)","data":{"k":"v",}}}"#,
                #"{"message":{"token":"\#(device)","data":{"k":"\ud800"}}}"#,
                // The body, the message and apns are three levels of the 512; the payload's 510 more are too many.
                #"{"message":{"token":"\#(device)","apns":{"payload":"# + nested(510) + "}}}",
            ]
            for body in refused {
                let reply = try await client.call(.post, Self.send, body: body)
                #expect(reply.status == .badRequest, "\(body.prefix(60))")
                #expect(reply.googleStatus == "INVALID_ARGUMENT")
                #expect(reply.text.contains("Invalid JSON payload received"), "\(reply.text)")
            }
            #expect(try await client.headSeq() == before)
            // 3 + 509 levels, the most there may be: parsed, validated, stored (under 4096 bytes) and recorded.
            let deep = #"{"message":{"token":"\#(device)","apns":{"payload":"# + nested(509) + "}}}"
            let reply = try await client.call(.post, Self.send, body: deep)
            #expect(reply.status == .ok, "\(reply.text.prefix(200))")
            #expect(try await client.headSeq() == before + 2)  // the send and its audience
        }
    }

    @Test("audit times must be real dates")
    func realDates() async throws {
        try await TestServer().run { client in
            let device = try await client.registerDevice()
            let subscribed = try await client.call(
                .post, "/v1/projects/demo-project/registrations/\(device)/topicSubscriptions?topicName=news", body: "{}"
            )
            #expect(subscribed.status == .ok)
            for at in [
                "2026-02-30", "2026-02-29", "2026-04-31", "2026-13-01", "2026-03-01T24:00:00Z",
                "2026-03-01T10:00:00+25:00",
            ] {
                let reply = try await client.call(
                    .get, "/v1/projects/demo-project/audit/topics/news?at=\(at)", headers: TestServer.Client.auditor)
                #expect(reply.status == .badRequest, "at=\(at)")
            }
            for at in ["2028-02-29", "2026-03-31", "2026-03-01T10:00:00+02:00"] {
                let reply = try await client.call(
                    .get, "/v1/projects/demo-project/audit/topics/news?at=\(at)", headers: TestServer.Client.auditor)
                #expect(reply.status == .ok, "at=\(at): \(reply.text)")
            }
        }
    }

    @Test("a credential works only in its own header")
    func credentialHeaders() async throws {
        try await TestServer().run { client in
            let device = try await client.registerDevice()
            // The admin secret as an API key, the client key as a bearer: neither is accepted.
            let adminAsKey = try await client.call(
                .post, Self.send, headers: [HTTPField.Name("x-goog-api-key")!: "owner"],
                body: #"{"message":{"token":"\#(device)"}}"#)
            #expect(adminAsKey.status == .unauthorized)
            let clientAsBearer = try await client.call(
                .post, "/v1/projects/demo-project/registrations", headers: [.authorization: "Bearer dev-client-key"],
                body: "{}")
            #expect(clientAsBearer.status == .unauthorized)
            let auditorAsKey = try await client.call(
                .get, "/v1/projects/demo-project/topics", headers: [HTTPField.Name("x-goog-api-key")!: "auditor"])
            #expect(auditorAsKey.status == .unauthorized)
        }
    }

    @Test("the data file deleted under a running server stops writes with 503; /readyz says so")
    func dataFileDeleted() async throws {
        let server = TestServer()
        try await server.run { client in
            let device = try await client.registerDevice()
            try FileManager.default.removeItem(atPath: server.directory.path + "/demo-project/data.mdb")
            let reply = try await client.call(
                .post, "/v1/projects/demo-project/registrations/\(device)/topicSubscriptions?topicName=news", body: "{}"
            )
            #expect(reply.status == .serviceUnavailable)
            #expect(reply.text.contains("deleted") && !reply.text.contains(server.directory.path))
            let ready = try await client.call(.get, "/readyz")
            #expect(ready.status == .serviceUnavailable)
            #expect(ready.text.contains("deleted"))
        }
    }
}

@Suite("Damaged files")
struct DamagedFileTests {
    @Test("a truncated data.mdb is refused (503, /readyz), never mapped past its end")
    func truncatedDataFile() async throws {
        let server = TestServer()
        do {
            let ledger = try openTestLedger(server.directory)
            for index in 0..<50 {
                _ = try await ledger.append(
                    WriteRequest(
                        actor: "t", requestID: "r\(index)",
                        operations: (0..<100).map {
                            .register(try! RegistrationToken("device-\(index)-\($0)"), platform: nil, appID: nil)
                        }))
            }
            ledger.close()
        }
        let path = server.directory.path + "/demo-project/data.mdb"
        let size = try #require(try FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber).intValue
        #expect(truncate(path, off_t(size / 2)) == 0)
        try await server.run { client in
            let reply = try await client.call(
                .get, "/v1/projects/demo-project/topics", headers: TestServer.Client.auditor)
            #expect(reply.status == .serviceUnavailable)
            #expect(reply.text.contains("damaged"))
            #expect(try await client.call(.get, "/readyz").status == .serviceUnavailable)
        }
    }
}
