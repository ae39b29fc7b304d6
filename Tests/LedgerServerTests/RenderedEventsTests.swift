import FCMWire
import LedgerCore
import NIOCore
import Testing

@testable import LedgerQueries
@testable import LedgerServer

@Suite("Rendered events")
struct RenderedEventsTests {
    static func message(seq: UInt64, payload: String, platform: DevicePlatform, expires: Int64) -> InboxMessage {
        InboxMessage(
            cursor: seq, messageID: 42, sentTime: LedgerTime(microseconds: 1_000_000),
            target: .topic(try! TopicName("news")),
            messageJSON: [], payloadJSON: Array(payload.utf8), expires: LedgerTime(microseconds: expires),
            collapseKey: nil, priority: .normal, pushType: nil, platform: platform)
    }

    static func text(_ buffer: ByteBuffer) -> String { String(buffer: buffer) }

    @Test("an event is rendered once per send, platform and expiry, as DeliveryJSON renders it")
    func renderedOncePerKey() {
        let events = RenderedEvents(project: .default)
        let ios = Self.message(seq: 7, payload: #"{"aps":{}}"#, platform: .ios, expires: 5_000_000)
        var expected: [UInt8] = []
        DeliveryJSON.event(ios, project: .default, to: &expected)
        #expect(Array(buffer: events.event(ios)) == expected)
        // Another platform's payload, or another expiry, of the same send is its own event.
        let android = Self.message(seq: 7, payload: #"{"data":{}}"#, platform: .android, expires: 5_000_000)
        #expect(Self.text(events.event(android)).contains(#""payload":{"data":{}}"#))
        let later = Self.message(seq: 7, payload: #"{"aps":{}}"#, platform: .ios, expires: 9_000_000)
        #expect(Self.text(events.event(later)).contains("1970-01-01T00:00:09"))
        #expect(Self.text(events.event(ios)).contains("1970-01-01T00:00:05"))
    }

    @Test("a rolled-back seq's event is forgotten with its prepared send: the next send at that seq is its own")
    func forgottenWithPreparedSends() {
        let delivery = DeliveryState(project: .default)
        let first = Self.message(seq: 9, payload: #"{"first":1}"#, platform: .web, expires: 5_000_000)
        #expect(Self.text(delivery.events.event(first)).contains(#"{"first":1}"#))
        let next = Self.message(seq: 9, payload: #"{"second":2}"#, platform: .web, expires: 5_000_000)
        // Without forgetting, seq 9 would still be the first send's bytes.
        #expect(Self.text(delivery.events.event(next)).contains(#"{"first":1}"#))
        delivery.forgetPreparedSends()
        #expect(Self.text(delivery.events.event(next)).contains(#"{"second":2}"#))
    }
}
