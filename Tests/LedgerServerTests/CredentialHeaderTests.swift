import HTTPTypes
import Testing

@testable import LedgerServer

/// Which header carries which credential, the scheme's case, and the status and message of each refusal,
/// through a route that admits admins and devices (per-token subscribe) with the dev credentials.
@Suite struct CredentialHeaderTests {
    static let apiKey = HTTPField.Name("x-goog-api-key")!

    struct Case: Sendable, CustomStringConvertible {
        let description: String
        let headers: HTTPFields
        let project: String
        let status: HTTPResponse.Status
        let message: String?

        init(
            _ description: String, _ headers: HTTPFields, project: String = "demo-project",
            _ status: HTTPResponse.Status, _ message: String? = nil
        ) {
            self.description = description
            self.headers = headers
            self.project = project
            self.status = status
            self.message = message
        }
    }

    static let cases: [Case] = [
        Case("admin bearer", [.authorization: "Bearer owner"], .ok),
        Case("scheme in lower case", [.authorization: "bearer owner"], .ok),
        Case("scheme in upper case", [.authorization: "BEARER owner"], .ok),
        Case("client key as x-goog-api-key", [apiKey: "dev-client-key"], .ok),
        Case(
            "two spaces: the secret has a leading space", [.authorization: "Bearer  owner"], .unauthorized,
            "The credential given is not valid."),
        Case(
            "a client key as a bearer", [.authorization: "Bearer dev-client-key"], .unauthorized,
            "The credential given is not valid."),
        Case(
            "an admin key as x-goog-api-key", [apiKey: "owner"], .unauthorized, "The credential given is not valid."),
        Case(
            "another scheme", [.authorization: "Basic owner"], .unauthorized,
            "Request is missing required authentication credential: a Bearer token or an x-goog-api-key header."),
        Case(
            "no credential", [:], .unauthorized,
            "Request is missing required authentication credential: a Bearer token or an x-goog-api-key header."),
        Case(
            "an auditor on a write", [.authorization: "Bearer auditor"], .forbidden,
            "The auditor credential may not call this method."),
        Case(
            "another project", [.authorization: "Bearer owner"], project: "other-project", .forbidden,
            "The credential given is not valid for project other-project."),
        Case(
            "an auditor bearer and a client key: the client may",
            [.authorization: "Bearer auditor", apiKey: "dev-client-key"], .ok),
        Case(
            "an auditor bearer and an admin secret as the key", [.authorization: "Bearer auditor", apiKey: "owner"],
            .forbidden, "The auditor credential may not call this method."),
    ]

    @Test(arguments: cases)
    func credential(_ test: Case) async throws {
        try await TestServer().run { client in
            let token = try await client.registerDevice()
            var headers = test.headers
            headers[.contentType] = "application/json"
            let reply = try await client.call(
                .post, "/v1/projects/\(test.project)/registrations/\(token)/topicSubscriptions?topicName=news",
                headers: headers, body: "{}")
            #expect(reply.status == test.status, "\(reply.text)")
            if let message = test.message { #expect(reply.error["message"] as? String == message, "\(reply.text)") }
        }
    }
}
