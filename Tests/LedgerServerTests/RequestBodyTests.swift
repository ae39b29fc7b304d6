import Foundation
import HTTPTypes
import LedgerCore
import LedgerServer
import Testing

/// The typed request bodies of the device routes (registration, acknowledgement) and the per-token subscribe
/// body check: each refusal is a 400 (naming the field where there is one) and appends nothing; what is
/// accepted is what is recorded.
@Suite("Typed request bodies")
struct RequestBodyTests {
    static let registrations = "/v1/projects/demo-project/registrations"

    @Test("registration: unknown members, wrong types and long strings are refused naming the field")
    func registration() async throws {
        try await TestServer().run { client in
            let before = try await client.headSeq()
            let refused: [(body: String, field: String)] = [
                (#"{"platform":"ios","color":"red"}"#, "color"),
                (#"{"platform":null}"#, "platform"),
                (#"{"appId":7}"#, "appId"),
                (#"{"app_id":["x"]}"#, "appId"),
                (#"{"appId":"\#(String(repeating: "a", count: 257))"}"#, "appId"),
                (#"{"platform":"\#(String(repeating: "i", count: 257))"}"#, "platform"),
            ]
            for (body, field) in refused {
                let reply = try await client.call(
                    .post, Self.registrations, headers: TestServer.Client.device, body: body)
                #expect(reply.status == .badRequest, "\(body)")
                #expect(reply.fieldViolations.first?["field"] == field, "\(body)")
            }
            for body in ["[]", #""{}""#, "7"] {
                let reply = try await client.call(
                    .post, Self.registrations, headers: TestServer.Client.device, body: body)
                #expect(reply.status == .badRequest, "\(body)")
                #expect((reply.error["message"] as? String)?.contains("must be a JSON object") == true, "\(body)")
            }
            #expect(try await client.headSeq() == before)

            // Both spellings of the app id are read; the platform is lowercased; 256 bytes is the limit.
            let longest = String(repeating: "a", count: 256)
            for (body, platform, appID) in [
                (#"{"platform":"Android","app_id":"com.snake"}"#, "android", "com.snake"),
                (#"{"appId":"\#(longest)"}"#, nil, longest),
                ("{}", nil, nil),
            ] as [(String, String?, String?)] {
                let reply = try await client.call(
                    .post, Self.registrations, headers: TestServer.Client.device, body: body)
                #expect(reply.status == .ok, "\(body)")
                guard
                    case .registered(_, let recordedPlatform, let recordedAppID) = try await client.events().last?.body
                else {
                    Issue.record("no registration recorded for \(body)")
                    continue
                }
                #expect(recordedPlatform == platform)
                #expect(recordedAppID == appID)
            }
        }
    }

    @Test("per-token subscribe: no body or any JSON object; anything else is 400 and appends nothing")
    func subscribeBody() async throws {
        try await TestServer().run { client in
            let token = try await client.registerDevice()
            let base = "/v1/projects/demo-project/registrations/\(token)/topicSubscriptions?topicName="
            for (index, body) in [nil, "", "{}", #"{"anything":[1,{"a":null}]}"#].enumerated() {
                let reply = try await client.call(.post, base + "t\(index)", body: body)
                #expect(reply.status == .ok, "\(body ?? "no body")")
            }
            let before = try await client.headSeq()
            for body in ["[]", "null", #""text""#, "{", #"{"a":1,"a":2}"#, "  ", #"{"a":1} x"#, #"{"a":[1,]}"#] {
                let reply = try await client.call(.post, base + "refused", body: body)
                #expect(reply.status == .badRequest, "\(body)")
                #expect(reply.googleStatus == "INVALID_ARGUMENT", "\(body)")
            }
            #expect(try await client.headSeq() == before)
        }
    }

    @Test("acknowledgement: an unknown member next to a good cursor is refused naming it")
    func acknowledgement() async throws {
        try await TestServer().run { client in
            let token = try await client.registerDevice()
            let before = try await client.headSeq()
            let reply = try await client.call(
                .post, Self.registrations + "/\(token)/messages:ack", headers: TestServer.Client.device,
                body: #"{"through":"0","extra":1}"#)
            #expect(reply.status == .badRequest)
            #expect(reply.fieldViolations.first?["field"] == "extra")
            let missing = try await client.call(
                .post, Self.registrations + "/\(token)/messages:ack", headers: TestServer.Client.device, body: "{}")
            #expect(missing.status == .badRequest)
            #expect(missing.fieldViolations.first?["field"] == "through")
            let number = try await client.call(
                .post, Self.registrations + "/\(token)/messages:ack", headers: TestServer.Client.device,
                body: #"{"through":5}"#)
            #expect(number.status == .badRequest)
            #expect((number.error["message"] as? String)?.contains("a cursor (a decimal string)") == true)
            #expect(try await client.headSeq() == before)
        }
    }
}
