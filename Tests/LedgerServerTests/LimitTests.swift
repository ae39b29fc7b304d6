import Foundation
import HTTPTypes
import LedgerCore
@testable import LedgerServer
import Testing

/// A clock the test moves by hand.
final class ManualClock: @unchecked Sendable {
    // @unchecked: `seconds` is only touched with `lock` held.
    private let lock = NSLock()
    private var seconds = 1000.0

    func advance(_ delta: Double) {
        lock.lock()
        seconds += delta
        lock.unlock()
    }

    var now: Double {
        lock.lock()
        defer { lock.unlock() }
        return seconds
    }
}

@Suite("Rate limits and quotas")
struct LimitTests {
    @Test("a single subscription change over the rate is 429 RESOURCE_EXHAUSTED with Retry-After, then recovers")
    func subscriptionRate() async throws {
        let clock = ManualClock()
        try await TestServer(configure: {
            $0.subscriptionChangesPerSecond = 2
            $0.rateClock = { clock.now }
        }).run { client in
            let token = try await client.registerDevice()
            let base = "/v1/projects/demo-project/registrations/\(token)/topicSubscriptions"
            #expect(try await client.call(.post, base + "?topicName=a", body: "{}").status == .ok)
            #expect(try await client.call(.post, base + "?topicName=b", body: "{}").status == .ok)
            let before = try await client.headSeq()
            let limited = try await client.call(.post, base + "?topicName=c", body: "{}")
            #expect(limited.status == .tooManyRequests)
            #expect(limited.googleStatus == "RESOURCE_EXHAUSTED")
            #expect(limited.errorCode == "RESOURCE_EXHAUSTED")
            #expect(limited.headers[.retryAfter] == "1")
            #expect(try await client.headSeq() == before)
            clock.advance(1)
            #expect(try await client.call(.post, base + "?topicName=c", body: "{}").status == .ok)
        }
    }

    /// A server whose project may make `changesPerSecond` subscription changes on a clock that stands still,
    /// with `devices` devices registered; `body` gets the client and their tokens.
    private func withSubscriptionBudget(
        _ changesPerSecond: Int, devices: Int,
        _ body: @escaping @Sendable (TestServer.Client, [String]) async throws -> Void
    ) async throws {
        let clock = ManualClock()
        try await TestServer(configure: {
            $0.subscriptionChangesPerSecond = changesPerSecond
            $0.rateClock = { clock.now }
        }).run { client in
            var tokens: [String] = []
            for _ in 0..<devices { tokens.append(try await client.registerDevice()) }
            try await body(client, tokens)
        }
    }

    @Test("in a batch, tokens beyond the budget get RESOURCE_EXHAUSTED and the rest succeed")
    func batchPartialSuccess() async throws {
        try await withSubscriptionBudget(3, devices: 4) { client, tokens in
            let list = (tokens.prefix(2) + ["bad token", "unknown-token"] + tokens.suffix(2)).map { "\"\($0)\"" }
            let before = try await client.headSeq()
            let reply = try await client.call(
                .post, "/iid/v1:batchAdd",
                body: #"{"to":"/topics/news","registration_tokens":[\#(list.joined(separator: ","))]}"#)
            #expect(reply.status == .ok)
            let results = reply.json["results"] as? [[String: String]]
            #expect(
                results == [
                    [:], [:], ["error": "INVALID_ARGUMENT"], ["error": "NOT_FOUND"],
                    ["error": "RESOURCE_EXHAUSTED"], ["error": "RESOURCE_EXHAUSTED"],
                ])
            #expect(reply.headers[.retryAfter] != nil)
            #expect(try await client.headSeq() == before + 2)
        }
    }

    @Test("in a batch, a repeated token shares its first occurrence's outcome, budget or not; malformed ones take none")
    func batchRepeatsShareOutcomes() async throws {
        try await withSubscriptionBudget(3, devices: 4) { client, tokens in
            let (a, b, c, d) = (tokens[0], tokens[1], tokens[2], tokens[3])
            func batchAdd(_ list: [String]) async throws -> [[String: String]]? {
                let body = list.map { "\"\($0)\"" }.joined(separator: ",")
                let reply = try await client.call(
                    .post, "/iid/v1:batchAdd", body: #"{"to":"/topics/news","registration_tokens":[\#(body)]}"#)
                #expect(reply.status == .ok)
                return reply.json["results"] as? [[String: String]]
            }
            let before = try await client.headSeq()
            // Two changes take two units of the three, however often their tokens and malformed ones repeat.
            #expect(
                try await batchAdd([a, "bad token", b, a, "bad token", b]) == [
                    [:], ["error": "INVALID_ARGUMENT"], [:], [:], ["error": "INVALID_ARGUMENT"], [:],
                ])
            #expect(try await client.headSeq() == before + 2)
            // One unit left: c takes it, d is over the budget, and each repeat shares its first outcome.
            #expect(
                try await batchAdd([c, d, c, d]) == [
                    [:], ["error": "RESOURCE_EXHAUSTED"], [:], ["error": "RESOURCE_EXHAUSTED"],
                ])
            #expect(try await client.headSeq() == before + 3)
        }
    }

    @Test("first occurrences: each position names where its token first appears; malformed ones name themselves")
    func firstOccurrences() throws {
        let tokens = try ["aa", "bb", "aa", "cc", "bb", "aa"].map { try RegistrationToken($0) }
        let list: [RegistrationToken?] = [tokens[0], nil, tokens[1], tokens[2], nil, tokens[3], tokens[4], tokens[5]]
        #expect(InstanceIDRoutes.firstOccurrences(of: list) == [0, 1, 2, 0, 4, 5, 2, 0])
        #expect(InstanceIDRoutes.firstOccurrences(of: []) == [])
    }

    @Test("sends over the quota are 429 QUOTA_EXCEEDED with Retry-After and append nothing")
    func sendQuota() async throws {
        let clock = ManualClock()
        try await TestServer(configure: {
            $0.sendsPerMinute = 2
            $0.rateClock = { clock.now }
        }).run { client in
            let send = "/v1/projects/demo-project/messages:send"
            let body = #"{"message":{"topic":"news"}}"#
            #expect(try await client.call(.post, send, body: body).status == .ok)
            #expect(try await client.call(.post, send, body: body).status == .ok)
            let over = try await client.call(.post, send, body: body)
            #expect(over.status == .tooManyRequests)
            #expect(over.errorCode == "QUOTA_EXCEEDED")
            #expect(over.headers[.retryAfter] == "30")
            // Two sents and their two audiences; nothing for the refused send.
            let kinds = try await client.events().map(\.kind)
            #expect(kinds.filter { $0 == .sent }.count == 2 && kinds.filter { $0 == .audience }.count == 2)
            #expect(kinds.count == 4)
            clock.advance(30)
            #expect(try await client.call(.post, send, body: body).status == .ok)
        }
    }
}
