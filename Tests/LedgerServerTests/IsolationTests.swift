import Foundation
import HTTPTypes
import LedgerCore
import LedgerServer
import LedgerTestSupport
import Testing
import LedgerStore

@Suite("Credentials from a config file")
struct IsolationTests {
    /// The sample config shipped in samples/ (its secrets are written in its comments in docs/server.md).
    static let samplePath = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("samples/server-config.json").path

    static func sampleConfig() throws -> CredentialStore {
        try ServerConfiguration.load(path: samplePath).credentials
    }

    @Test("a credential never reaches another project's data")
    func crossProject() async throws {
        let credentials = try Self.sampleConfig()
        #expect(credentials.projects == [try ProjectID("shop-prod"), try ProjectID("news-staging")])
        try await TestServer(configure: {
            $0.credentials = credentials; $0.isDevelopment = false
        }).run { client in
            let shop: HTTPFields = [.authorization: "Bearer shop-admin-secret"]
            let news: HTTPFields = [.authorization: "Bearer news-admin-secret"]
            let shopClient: HTTPFields = [HTTPField.Name("x-goog-api-key")!: "shop-client-key"]
            let registered = try await client.call(
                .post, "/v1/projects/shop-prod/registrations", headers: shopClient, body: "{}")
            let token = try #require(registered.json["token"] as? String)
            let subscribe = "/registrations/\(token)/topicSubscriptions?topicName=deals"
            #expect(
                try await client.call(.post, "/v1/projects/shop-prod" + subscribe, headers: shop, body: "{}").status
                    == .ok)
            // The news admin can neither act on shop-prod nor see the shop token in its own project.
            let cross = try await client.call(.post, "/v1/projects/shop-prod" + subscribe, headers: news, body: "{}")
            #expect(cross.status == .forbidden)
            let own = try await client.call(.post, "/v1/projects/news-staging" + subscribe, headers: news, body: "{}")
            #expect(own.status == .notFound)
            let viaIID = try await client.call(
                .post, "/iid/v1:batchAdd", headers: news,
                body: #"{"to":"/topics/deals","registration_tokens":["\#(token)"]}"#)
            #expect(viaIID.json["results"] as? [[String: String]] == [["error": "NOT_FOUND"]])
            let listing = try await client.call(.get, "/v1/projects/shop-prod/topics", headers: news)
            #expect(listing.status == .forbidden)
            let devKey = try await client.call(
                .get, "/v1/projects/shop-prod/topics", headers: [.authorization: "Bearer owner"])
            #expect(devKey.status == .unauthorized)
            let shopAuditor = try await client.call(
                .get, "/v1/projects/shop-prod/topics", headers: [.authorization: "Bearer shop-auditor-secret"])
            #expect((shopAuditor.json["topics"] as? [[String: Any]])?.first?["subscriberCount"] as? Int == 1)
        }
    }

    @Test("a config file sets limits and the condition rule; limits left out keep FCM's defaults")
    func configLimits() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path + "/config.json"
        let hash = String(repeating: "ab", count: 32)
        try #"""
        {"conditionPrecedence": "standard",
         "limits": {"topicsPerInstance": 7, "tokensPerBatch": 10, "subscriptionChangesPerSecond": 50,
                    "sendsPerMinute": 120.0},
         "projects": {"p": {"adminKeys": ["sha256:\#(hash)"]}}}
        """#.write(toFile: path, atomically: true, encoding: .utf8)
        let configuration = try ServerConfiguration.load(path: path)
        #expect(configuration.precedence == .standard)
        #expect(configuration.limits.maximumTopicsPerInstance == 7)
        #expect(configuration.maximumBatchTokens == 10)
        #expect(configuration.subscriptionChangesPerSecond == 50)
        #expect(configuration.sendsPerMinute == 120)
        #expect(configuration.maximumBodyBytes == ServerConfiguration.development.maximumBodyBytes)
        #expect(!configuration.isDevelopment)
        #expect(configuration.credentials.projects == [try ProjectID("p")])
        // The shipped sample loads and spells out FCM's defaults.
        let sample = try ServerConfiguration.load(path: Self.samplePath)
        #expect(sample.limits.maximumTopicsPerInstance == 2000 && sample.maximumBatchTokens == 1000)
        #expect(sample.subscriptionChangesPerSecond == 3000 && sample.sendsPerMinute == 600_000)
    }

    @Test("malformed config files are refused with a clear message")
    func badConfig() throws {
        let zeros = String(repeating: "0", count: 64)
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        for (text, fragment) in [
            ("{", "expected {\"projects\""),
            (#"{"projects":{"../x":{"adminKeys":["sha256:00"]}}}"#, "project id must be"),
            (#"{"projects":{"p":{"adminKeys":["plain-secret"]}}}"#, "sha256:<64 hex digits>"),
            (#"{"projects":{"p":{"adminKeys":"x"}}}"#, "expected a list of strings"),
            (#"{"projects":{}}"#, "names no keys"),
            (#"{"limits":{}}"#, "expected {\"projects\""),
            (#"{"projects":{"p":{"adminKeys":[]}},"limit":{}}"#, "unknown key"),
            (
                #"{"projects":{"p":{"adminKeys":["sha256:\#(zeros)"]}},"limits":{"topicsPerInstanse":5}}"#,
                "unknown limit"
            ),
            (
                #"{"projects":{"p":{"adminKeys":["sha256:\#(zeros)"]}},"limits":{"sendsPerMinute":true}}"#,
                "whole number"
            ),
            (#"{"projects":{"p":{"adminKeys":["sha256:\#(zeros)"]}},"limits":{"sendsPerMinute":0}}"#, "at least 1"),
            (#"{"projects":{"p":{"adminKeys":["sha256:\#(zeros)"]}},"limits":{"tokensPerBatch":2.5}}"#, "whole number"),
            (
                #"{"projects":{"p":{"adminKeys":["sha256:\#(zeros)"]}},"conditionPrecedence":"ltr"}"#,
                "left-to-right or standard"
            ),
        ] {
            let path = directory.path + "/config.json"
            try text.write(toFile: path, atomically: true, encoding: .utf8)
            #expect {
                try ServerConfiguration.load(path: path).credentials
            } throws: { "\($0)".contains(fragment) }
        }
        #expect(throws: LedgerCoreError.self) { try ServerConfiguration.load(path: directory.path + "/missing.json") }
    }
}
