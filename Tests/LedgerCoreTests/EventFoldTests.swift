import LedgerCore
import Testing
import LedgerTestSupport

@Suite("The fold", .offThePool)
struct EventFoldTests {
    let a = try! RegistrationToken("token-a")
    let b = try! RegistrationToken("token-b")
    let news = try! TopicName("news")
    let sports = try! TopicName("sports")

    func event(_ seq: UInt64, _ body: LedgerEvent.Body) -> LedgerEvent {
        LedgerEvent(seq: seq, time: LedgerTime(microseconds: Int64(seq)), actor: "t", requestID: "r", body: body)
    }

    @Test("subscribe, re-subscribe, unsubscribe and unregister change exactly what the spec says")
    func semantics() {
        var state = InMemoryLedgerState()
        state.apply(event(1, .registered(token: a, platform: "ios", appID: nil)))
        state.apply(event(2, .registered(token: b, platform: nil, appID: nil)))
        state.apply(event(3, .subscribed(token: a, topic: news, via: .v1)))
        state.apply(event(4, .subscribed(token: a, topic: news, via: .client)))
        state.apply(event(5, .subscribed(token: a, topic: sports, via: .iid)))
        state.apply(event(6, .subscribed(token: b, topic: news, via: .iid)))
        #expect(state.topics(of: a) == [news, sports])
        #expect(state.members(of: news) == [a, b])
        state.apply(event(7, .unsubscribed(token: b, topic: sports, via: .iid)))
        #expect(state.topics(of: b) == [news])
        state.apply(event(8, .unregistered(token: a, reason: "gone")))
        #expect(state.topics(of: a).isEmpty)
        #expect(state.members(of: news) == [b])
        #expect(!state.isRegistered(a))
        #expect(state.registeredTokens == [b])
        // Events for an unregistered instance are no-ops.
        state.apply(event(9, .subscribed(token: a, topic: news, via: .v1)))
        #expect(state.members(of: news) == [b])
        // Re-registration keeps the instance id and starts with no topics.
        state.apply(event(10, .registered(token: a, platform: nil, appID: nil)))
        #expect(state.isRegistered(a))
        #expect(state.instanceID(for: a) == 1)
        #expect(state.topics(of: a).isEmpty)
        #expect(state.seq == 10)
    }

    @Test("ids are assigned in log order")
    func idsInLogOrder() {
        var state = InMemoryLedgerState()
        state.apply(event(1, .registered(token: b, platform: nil, appID: nil)))
        state.apply(event(2, .registered(token: a, platform: nil, appID: nil)))
        state.apply(event(3, .subscribed(token: a, topic: sports, via: .v1)))
        state.apply(event(4, .unsubscribed(token: a, topic: news, via: .v1)))
        state.apply(event(5, .subscribed(token: b, topic: news, via: .v1)))
        #expect(state.instanceID(for: b) == 1)
        #expect(state.instanceID(for: a) == 2)
        #expect(state.topicNames == [sports, news])
    }
}
