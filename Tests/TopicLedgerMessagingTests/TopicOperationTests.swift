import Foundation
import LedgerTestSupport
import Testing

@testable import TopicLedgerMessaging
import LedgerStore
import LedgerServer
import HTTPTypes

@Suite("TopicLedgerMessaging: topics and tokens against the real server", .timeLimit(.minutes(2)))
struct TopicOperationTests {
    @Test("a subscribe before the token exists is queued, then applied when the app asks for the token")
    func queuedBeforeToken() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            let messaging = try Messaging(
                configuration: server.messagingConfiguration(autoInit: false, port: admin.port))
            let subscribed = Task { try await messaging.subscribe(toTopic: "/topics/weather") }
            #expect(await eventually { messaging.pendingTopicOperations.count == 1 })
            try await Task.sleep(for: .milliseconds(200))
            // Nothing was sent: auto-init is off and nobody asked for a token.
            #expect(messaging.registrationToken == nil)
            #expect(server.front.requests(.post, "/registrations").isEmpty)
            #expect(messaging.pendingTopicOperations.map(\.topic) == ["weather"])
            // Cancelling a caller ends its wait, not its operation.
            let cancelled = Task { try await messaging.subscribe(toTopic: "news") }
            #expect(await eventually { messaging.pendingTopicOperations.count == 2 })
            cancelled.cancel()
            await #expect(throws: CancellationError.self) { try await cancelled.value }

            let token = try await messaging.token()
            try await subscribed.value
            #expect(await eventually { messaging.pendingTopicOperations.isEmpty })
            #expect(try await admin.topics(of: token) == ["news", "weather"])
            #expect(messaging.topics == ["news", "weather"])
        }
    }

    @Test("topic names are checked as the iOS SDK checks them, before anything is stored or sent")
    func topicValidation() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            let messaging = try Messaging(configuration: server.messagingConfiguration(port: admin.port))
            for bad in ["", "/topics/", "has space", "émoji", String(repeating: "a", count: 901), "a/b"] {
                await #expect(throws: MessagingError.invalidTopicName(bad)) {
                    try await messaging.subscribe(toTopic: bad)
                }
            }
            #expect(messaging.pendingTopicOperations.isEmpty)
            #expect(server.front.requests(.post, "/registrations").isEmpty)
            // Every allowed byte, '%' and '~' included, reaches the server as the same name.
            let odd = "A-z_0.9~%25" + String(repeating: "x", count: 889)
            try await messaging.subscribe(toTopic: odd)
            let token = try #require(messaging.registrationToken)
            #expect(try await admin.topics(of: token) == [odd])
            try await messaging.unsubscribe(fromTopic: odd)
            #expect(try await admin.topics(of: token) == [])
            // Unsubscribing from a topic the device never had is done, not an error.
            try await messaging.unsubscribe(fromTopic: "never")
        }
    }

    @Test("a subscribe the server answers with 503 and then 429 Retry-After is retried until it succeeds")
    func retriedThroughUnavailableAndRateLimit() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            server.front.on(.post, "/topicSubscriptions", .status(503))
            server.front.on(
                .post, "/topicSubscriptions",
                .status(
                    429, retryAfter: 1,
                    body: #"{"error":{"code":429,"message":"slow down","status":"RESOURCE_EXHAUSTED"}}"#))
            let messaging = try Messaging(configuration: server.messagingConfiguration(port: admin.port))
            try await messaging.subscribe(toTopic: "news")
            let attempts = server.front.requests(.post, "/topicSubscriptions")
            #expect(attempts.count == 3)
            if attempts.count == 3 {
                // Not sooner than Retry-After.
                #expect(attempts[2].time - attempts[1].time >= .seconds(1))
            }
            #expect(try await admin.topics(of: try #require(messaging.registrationToken)) == ["news"])
        }
    }

    @Test("a new instance on the same store finishes the operations the last one left, with the same token")
    func restartFinishesPending() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            server.front.on(.post, "/topicSubscriptions", times: 1000, .status(503))
            let first = try Messaging(configuration: server.messagingConfiguration(port: admin.port))
            let token = try await first.token()
            let waiting = Task { try await first.subscribe(toTopic: "news") }
            #expect(await eventually { first.pendingTopicOperations.count == 1 })
            first.subscribe(toTopic: "sports", completion: nil)
            first.unsubscribe(fromTopic: "sports", completion: nil)
            first.subscribe(toTopic: "weather", completion: nil)
            #expect(await eventually { server.front.requests(.post, "/topicSubscriptions").count >= 2 })
            first.close()  // the app is terminated with four operations pending
            await #expect(throws: MessagingError.closed) { try await waiting.value }
            #expect(first.pendingTopicOperations.count == 4)
            server.front.clearRules()

            let second = try Messaging(configuration: server.messagingConfiguration(port: admin.port))
            #expect(second.registrationToken == token)
            #expect(second.pendingTopicOperations.map(\.topic) == ["news", "sports", "sports", "weather"])
            #expect(await eventually { second.pendingTopicOperations.isEmpty })
            #expect(try await admin.topics(of: token) == ["news", "weather"])
            #expect(second.topics == ["news", "weather"])
        }
    }

    @Test("after the server forgets the token, a new one is registered, announced, and the topics re-applied")
    func newTokenReappliesTopics() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            let messaging = try Messaging(configuration: server.messagingConfiguration(port: admin.port))
            var updates = messaging.tokenUpdates().makeAsyncIterator()
            try await messaging.subscribe(toTopic: "a")
            try await messaging.subscribe(toTopic: "b")
            let old = try #require(messaging.registrationToken)
            #expect(await updates.next() == old)
            // The backend deletes the registration (an uninstall reported by APNs, an admin).
            #expect(try await admin.call(.delete, "/v1/projects/demo-project/registrations/\(old)").status == .ok)

            try await messaging.subscribe(toTopic: "c")
            let new = try #require(messaging.registrationToken)
            #expect(new != old)
            #expect(await updates.next() == new)
            #expect(await eventually { messaging.pendingTopicOperations.isEmpty })
            #expect(try await admin.topics(of: new) == ["a", "b", "c"])
            #expect(try await admin.topics(of: old) == nil)
        }
    }

    @Test(
        "a registration the server no longer knows (erased, or expired: 404 UNREGISTERED) is replaced: a new token, heard through tokenUpdates, with the wanted topics subscribed again"
    )
    func replacedAfterUnregistered() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            let messaging = try Messaging(configuration: server.messagingConfiguration(port: admin.port))
            let updates = messaging.tokenUpdates()
            try await messaging.subscribe(toTopic: "news")
            try await messaging.subscribe(toTopic: "sports")
            let first = try #require(messaging.registrationToken)
            let erased = try await admin.call(
                .post, "/v1/projects/demo-project/registrations/\(first):erase", body: #"{"reason":"test"}"#)
            #expect(erased.status == .ok)
            await #expect(throws: MessagingError.unregistered) { _ = try await messaging.fetchMessages() }
            let second = try await messaging.token()
            #expect(second != first)
            #expect(try await eventually { try await admin.topics(of: second) == ["news", "sports"] })
            var heard = updates.makeAsyncIterator()
            #expect(await heard.next() == first)
            #expect(await heard.next() == second)
            messaging.close()
        }
    }

    @Test("a front that calls every token unregistered gets new registrations with backoff, not in a tight loop")
    func unregisteredLoopBacksOff() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            server.front.on(
                .post, "/topicSubscriptions", times: 10_000,
                .status(404, body: #"{"error":{"code":404,"message":"gone","status":"NOT_FOUND"}}"#))
            let messaging = try Messaging(configuration: server.messagingConfiguration(port: admin.port))
            messaging.subscribe(toTopic: "news", completion: nil)
            let registrations = {
                server.front.requests(.post, "/registrations").filter { $0.path.hasSuffix("/registrations") }.count
            }
            try await Task.sleep(for: .seconds(1))
            // Backoff from 50 ms doubling to 500 ms: about six in a second; a tight loop makes hundreds. A loaded
            // machine makes fewer, never more, so only the upper bound is timed; that it does re-register is
            // waited for.
            let inOneSecond = registrations()
            #expect(inOneSecond <= 12, "\(inOneSecond) registrations in a second")
            #expect(await eventually { registrations() >= 2 })
            messaging.close()
            #expect(messaging.pendingTopicOperations.map(\.topic) == ["news"])
        }
    }

    @Test("completion handlers run in call order: subscribe then unsubscribe leaves the topic off")
    func completionHandlersKeepOrder() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            let messaging = try Messaging(configuration: server.messagingConfiguration(port: admin.port))
            let results = ResultLog()
            for round in 0..<3 {
                messaging.subscribe(toTopic: "flip") { results.add("subscribe \(round)", $0) }
                messaging.unsubscribe(fromTopic: "flip") { results.add("unsubscribe \(round)", $0) }
            }
            messaging.subscribe(toTopic: "kept") { results.add("kept", $0) }
            #expect(await eventually { results.count == 7 })
            #expect(results.errors.isEmpty)
            #expect(results.names.first == "subscribe 0" && results.names.last == "kept")
            #expect(try await admin.topics(of: try #require(messaging.registrationToken)) == ["kept"])
        }
    }

    @Test(
        "errors arrive typed: a wrong key, too many topics; a refused subscribe leaves the wanted topics as they were")
    func typedErrors() async throws {
        let server = LibraryServer { $0.limits.maximumTopicsPerInstance = 2 }
        try await server.run { admin in
            let wrongKey = try Messaging(
                configuration: server.messagingConfiguration(store: "wrong.json", key: "not-a-key", port: admin.port))
            await #expect {
                try await wrongKey.subscribe(toTopic: "news")
            } throws: { error in
                guard case .authentication = error as? MessagingError else { return false }
                return true
            }
            #expect(wrongKey.pendingTopicOperations.isEmpty && wrongKey.topics.isEmpty)

            let messaging = try Messaging(configuration: server.messagingConfiguration(port: admin.port))
            try await messaging.subscribe(toTopic: "one")
            try await messaging.subscribe(toTopic: "two")
            await #expect {
                try await messaging.subscribe(toTopic: "three")
            } throws: { error in
                guard case .tooManyTopics = error as? MessagingError else { return false }
                return true
            }
            #expect(messaging.topics == ["one", "two"])
            #expect(messaging.pendingTopicOperations.isEmpty)
        }
    }

    @Test("a store that is not the library's is refused with a clear error, not overwritten")
    func unreadableStore() throws {
        let directory = TemporaryDirectory("messaging-store")
        defer { directory.remove() }
        let url = URL(fileURLWithPath: directory.path).appendingPathComponent("device.json")
        try Data("not json".utf8).write(to: url)
        let configuration = MessagingConfiguration(
            serverURL: URL(string: "http://127.0.0.1:9")!, projectID: "demo-project", apiKey: "k", storeURL: url)
        #expect(throws: MessagingError.self) { try Messaging(configuration: configuration) }
        #expect(try Data(contentsOf: url) == Data("not json".utf8))
    }
}

/// Completion results in arrival order.
final class ResultLog: @unchecked Sendable {
    // @unchecked: guarded by `lock`.
    private let lock = NSLock()
    private var entries: [(String, (any Error)?)] = []
    func add(_ name: String, _ error: (any Error)?) {
        lock.lock()
        entries.append((name, error))
        lock.unlock()
    }
    var count: Int {
        lock.lock()
        defer { lock.unlock() }
        return entries.count
    }
    var names: [String] {
        lock.lock()
        defer { lock.unlock() }
        return entries.map(\.0)
    }
    var errors: [any Error] {
        lock.lock()
        defer { lock.unlock() }
        return entries.compactMap(\.1)
    }
}
