import Foundation
import HTTPTypes
import LedgerCore
import LedgerStore
import LedgerTestSupport
import PropertyBased
import Testing

@_spi(Internal) import Hummingbird
@testable import LedgerServer

/// The byte-level table of ``TokenPathRouter`` against Hummingbird's trie over the server's own routes.
@Suite("Token paths matched on bytes agree with Hummingbird's router")
struct TokenPathRouterTests {
    /// The server's routes, as `buildRouter` registers them.
    static let router: TokenPathRouter = {
        let directory = TemporaryDirectory("token-path-router")
        var configuration = ServerConfiguration.development
        configuration.dataDirectory = directory.path
        // A registry without a cluster throws nothing.
        let ledgers = try! LedgerRegistry(configuration: configuration, logger: quietLogger)
        return buildRouter(configuration: configuration, ledgers: ledgers, logger: quietLogger)
    }()

    /// Hummingbird's trie over the same routes, each resolving to its path's description.
    static let trie: RouterTrie<String> = {
        let builder = RouterPathTrieBuilder<String>()
        for route in router.registeredRoutes { builder.addEntry(route.path, value: route.path.description) }
        return builder.build()
    }()

    static let responder = TokenPathResponder(
        routes: router.byteMatchedRoutes(), fallback: router.router.buildResponder())

    static let token = String(repeating: "aB3_-", count: 30) + ":x"

    @Test("the table holds the per-token routes and only those")
    func table() {
        let entries = Self.router.byteMatchedRoutes()
        let paths = Set(entries.map(\.endpointPath))
        #expect(paths.contains("/v1/projects/{project}/registrations/{token}/topicSubscriptions"))
        #expect(paths.contains("/v1/projects/{project}/registrations/{token}/topicSubscriptions/{topic}"))
        #expect(paths.allSatisfy { $0.contains("{token}") })
        // Each method of each route once.
        #expect(Set(entries.map { "\($0.method) \($0.endpointPath)" }).count == entries.count)
    }

    @Test("a token route that another route could also match is left to the router")
    func overlapping() throws {
        let router = TokenPathRouter(router: Router(context: LedgerRequestContext.self))
        let ok = CallbackResponder<LedgerRequestContext> { _, _ in Response(status: .ok) }
        router.on("/devices/:token/state", method: .get, responder: ok)
        router.on("/devices/mine/state", method: .get, responder: ok)  // the trie may prefer this one
        router.on("/devices/:token/topics/:topic", method: .get, responder: ok)
        router.on("/devices/:token/topics/latest", method: .get, responder: ok)
        router.on("/devices/:token", method: .get, responder: ok)
        #expect(router.byteMatchedRoutes().map(\.endpointPath) == ["/devices/{token}"])
        // A wildcard may match a path of any length: with one registered, the table holds nothing.
        router.on("/files/**", method: .get, responder: ok)
        #expect(router.byteMatchedRoutes().isEmpty)
    }

    @Test("a canonical subscribe path matches with the parameters the trie gives")
    func subscribePath() throws {
        let path = "/v1/projects/demo-project/registrations/\(Self.token)/topicSubscriptions"
        let (entry, parameters) = try #require(Self.responder.match(path, method: .post))
        let (value, trieParameters) = try #require(Self.trie.resolve(path))
        #expect(entry.endpointPath == value)
        #expect(parameters.get("project") == "demo-project")
        #expect(parameters.get("token") == Self.token)
        #expect(Self.same(parameters, trieParameters))
    }

    @Test(
        "paths the table leaves to the router",
        arguments: [
            "/v1/projects/demo-project/registrations/TOKEN/topicSubscriptions/",  // trailing slash
            "//v1/projects/demo-project/registrations/TOKEN/topicSubscriptions",  // empty component
            "/v1/projects//demo-project/registrations/TOKEN/topicSubscriptions",
            "v1/projects/demo-project/registrations/TOKEN/topicSubscriptions",  // no leading slash
            "/v1/projects/demo-project/registrations/TOKEN/topicsubscriptions",  // another literal
            "/v1/projects/demo-project/registrations/TOKEN/apnsToken/x",  // no route
            "/v1/projects/demo-project/registrations/\u{301}TOKEN/topicSubscriptions",  // "/\u{301}": one Character
            "/v1/projects/demo-project/registrations/TOKEN\u{301}/topicSubscriptions",  // not ASCII
            "/v1/projects/demo project/registrations/TOKEN/topicSubscriptions",  // a space
            "/",
            "",
        ])
    func leftToRouter(path: String) {
        #expect(Self.responder.match(path.replacingOccurrences(of: "TOKEN", with: Self.token), method: .post) == nil)
    }

    @Test("every path: where the table matches, the trie resolves the same route with the same parameters")
    func differential() async throws {
        let pieces = [
            "v1", "projects", "demo-project", "registrations", "topicSubscriptions", "iid", "info", "rel",
            "topics", "messages:send", "healthz", "metrics", "audit", "Ｖ1", "\u{212A}", "é", "e\u{301}", "%2F",
            "\u{301}x", "\u{301}", "a b", "\r\n",
            Self.token, "t", "",
        ]
        var matched = 0
        await propertyCheck(count: 3000, input: Gen.uint64()) { seed in
            var generator = SeededGenerator(seed: seed)
            var components = (0..<Int.random(in: 0...8, using: &generator)).map { _ in
                pieces.randomElement(using: &generator)!
            }
            // Bias toward the shapes of the per-token routes, with one piece changed or not.
            if Bool.random(using: &generator) {
                components = ["v1", "projects", "demo-project", "registrations", Self.token, "topicSubscriptions"]
                if Bool.random(using: &generator) { components.append("topic-\(generator.next() % 10)") }
                if Bool.random(using: &generator) {
                    components[Int.random(in: 0..<components.count, using: &generator)] =
                        pieces.randomElement(using: &generator)!
                }
            }
            let path =
                (Bool.random(using: &generator) ? "/" : "") + components.joined(separator: "/")
                + (Int.random(in: 0..<8, using: &generator) == 0 ? "/" : "")
            let method = [HTTPRequest.Method.get, .post, .delete, .put].randomElement(using: &generator)!
            guard let (entry, parameters) = Self.responder.match(path, method: method) else { return }
            matched += 1
            guard let (value, trieParameters) = Self.trie.resolve(path) else {
                Issue.record("the table matched \(path) but the trie matches no route")
                return
            }
            #expect(entry.endpointPath == value, "\(path)")
            #expect(Self.same(parameters, trieParameters), "\(path)")
        }
        #expect(matched > 100)
    }

    @Test("a request the table answers and one the router answers get the same reply")
    func throughTheServer() async throws {
        try await TestServer().run { client in
            let token = try await client.registerDevice()
            let canonical = try await client.call(
                .post, "/v1/projects/demo-project/registrations/\(token)/topicSubscriptions?topicName=news", body: "{}")
            #expect(canonical.status == .ok)
            // Hummingbird's router skips the empty component: the same route, through the fallback.
            let repeated = try await client.call(
                .post, "/v1/projects/demo-project//registrations/\(token)/topicSubscriptions?topicName=news",
                body: "{}")
            #expect(repeated.status == .conflict)
            let other = try await client.call(
                .post, "/v1/projects/demo-project/registrations/\(token)/topicSubscriptions?topicName=sport",
                body: "{}")
            #expect(other.status == .ok)
            let removed = try await client.call(
                .delete, "/v1/projects/demo-project/registrations/\(token)/topicSubscriptions/sport")
            #expect(removed.status == .ok)
            let removedAgain = try await client.call(
                .delete, "/v1/projects/demo-project/registrations/\(token)/topicSubscriptions/sport/")
            #expect(removedAgain.status == .notFound)
            #expect(removedAgain.json["error"] != nil)
            // An auditor may read but not write: the route's own middleware runs on the table's path too.
            let denied = try await client.call(
                .post, "/v1/projects/demo-project/registrations/\(token)/topicSubscriptions?topicName=x",
                headers: TestServer.Client.auditor, body: "{}")
            #expect(denied.status == .forbidden)
            let listed = try await client.call(
                .get, "/v1/projects/demo-project/registrations/\(token)/topicSubscriptions",
                headers: TestServer.Client.auditor)
            #expect(listed.status == .ok)
            #expect((listed.json["topicSubscriptions"] as? [[String: Any]])?.count == 1)
        }
    }

    static func same(_ a: Parameters, _ b: Parameters) -> Bool {
        let left = a.map { "\($0.key)=\($0.value)" }.sorted()
        let right = b.map { "\($0.key)=\($0.value)" }.sorted()
        return left == right
    }
}
