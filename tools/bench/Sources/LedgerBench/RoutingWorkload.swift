import Foundation
import HTTPTypes
@_spi(Internal) import Hummingbird
import LedgerCore
import LedgerServer
import Logging

/// Routing a per-token path (`POST /v1/projects/{project}/registrations/{token}/topicSubscriptions`, a token of
/// 152 characters) over the server's own routes: ``TokenPathRouter``'s byte-level table against Hummingbird's
/// trie (`RouterTrie`, what its router resolves every other path with), in process, the lookup alone.
enum RoutingWorkload {
    static func run() throws -> [BenchResult] {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "ledger-bench-routing-\(getpid())")
        defer { try? FileManager.default.removeItem(at: directory) }
        var configuration = ServerConfiguration.development
        configuration.dataDirectory = directory.path
        let logger = Logger(label: "bench") { _ in SwiftLogNoOpLogHandler() }
        let router = buildRouter(
            configuration: configuration, ledgers: try LedgerRegistry(configuration: configuration, logger: logger),
            logger: logger)
        let table = TokenPathResponder(routes: router.byteMatchedRoutes(), fallback: router.router.buildResponder())
        let builder = RouterPathTrieBuilder<String>()
        for route in router.registeredRoutes { builder.addEntry(route.path, value: route.path.description) }
        let trie = builder.build()
        let token = String(repeating: "aB3_-", count: 30) + ":x"
        let path = "/v1/projects/demo-project/registrations/\(token)/topicSubscriptions"
        guard table.match(path, method: .post) != nil, trie.resolve(path) != nil else {
            fatalError("the bench's path is not routed")
        }
        let rounds = 200_000
        var found = 0
        let tableSeconds = median(runs: 7) {
            for _ in 0..<rounds where table.match(path, method: .post) != nil { found &+= 1 }
        }
        let trieSeconds = median(runs: 7) {
            for _ in 0..<rounds where trie.resolve(path) != nil { found &+= 1 }
        }
        precondition(found > 0)
        return [
            BenchResult(
                name: "route a per-token path: TokenPathRouter's byte table", unit: "paths/s",
                value: Double(rounds) / tableSeconds, baselineName: "Hummingbird's trie (RouterTrie.resolve)",
                baseline: Double(rounds) / trieSeconds,
                notes: "\(path.utf8.count)-byte path; ratio > 100 %: the table is faster")
        ]
    }
}
