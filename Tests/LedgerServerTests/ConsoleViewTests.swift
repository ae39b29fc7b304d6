import Foundation
import Mustache
import Testing

@testable import LedgerQueries
@testable import LedgerServer

/// The console's templates read the view models by their property names (swift-mustache reflects on them), so a
/// property renamed on one side and not the other would leave a field empty without a compiler error. Each page
/// is rendered here with a distinct value in every field, and every value must reach the HTML.
@Suite("Console view models reach their templates")
struct ConsoleViewTests {
    static let library: MustacheLibrary = (try? ConsoleTemplates.library()) ?? MustacheLibrary()
    static let visitor = ConsoleView.Visitor(project: "project-v1", role: "role-v2")

    func render<Content>(_ name: String, _ content: Content) -> String {
        let page = ConsoleView.Page(title: "title-v0", visitor: Self.visitor, content: content)
        return Self.library.render(page, withTemplate: name) ?? ""
    }

    func expectAll(_ html: String, _ values: [String], sourceLocation: SourceLocation = #_sourceLocation) {
        for value in values + ["title-v0", "project-v1", "role-v2"] {
            #expect(html.contains(value), "\(value) is not on the page", sourceLocation: sourceLocation)
        }
    }

    static func interval(_ from: UInt64, _ until: UInt64?) -> AuditJSON.Interval {
        AuditJSON.Interval(
            fromSeq: from, fromTime: "time-\(from)", untilSeq: until, untilTime: until.map { "time-\($0)" })
    }

    @Test("overview, messages and a message")
    func messagePages() {
        expectAll(
            render(
                "overview",
                ConsoleView.Overview(
                    events: 1001, headTime: "head-time-v", headHash: "head-hash-v", registered: 1002, instances: 1003,
                    topics: 1004, subscriptions: 1005, messages: 1006,
                    checkpoint: .init(size: 1007, note: "note-v"))),
            ["1001", "head-time-v", "head-hash-v", "1002", "1003", "1004", "1005", "1006", "1007", "note-v"])
        var messages = ConsoleView.Messages(target: "target-v", from: "from-v", to: "to-v")
        messages.error = "error-v"
        messages.sends = [
            .init(time: "sent-v", messageID: "2001", kind: "kind-v", target: "send-target-v", recipients: "2002")
        ]
        messages.next = "/next-v"
        expectAll(
            render("messages", messages),
            ["target-v", "from-v", "to-v", "error-v", "sent-v", "2001", "kind-v", "send-target-v", "2002", "/next-v"])
        let message = ConsoleView.Message(
            messageID: "3001", matches: false, verdict: "verdict-v", seq: 3002, time: "time-v", kind: "kind-v",
            target: "target-v", rule: "rule-v", recipientCount: 3003, replayDigest: "replay-digest-v", recorded: true,
            recordedCount: 3004, recordedDigest: "recorded-digest-v", audienceSeq: 3005, acknowledgedCount: 3006,
            pushCounts: .init(accepted: 3007, unregistered: 3008, failed: 3009, pending: 3010, expired: 3011),
            firstShown: 3012, lastShown: 3013,
            recipients: [.init(token: "recipient-v", acknowledged: true, push: "push-v")], next: "/next-v",
            messageJSON: "json-v", contentForgotten: "forgotten-v")
        expectAll(
            render("message", message),
            [
                "3001", "verdict-v", "3002", "time-v", "kind-v", "target-v", "rule-v", "3003", "replay-digest-v",
                "3004", "recorded-digest-v", "3005", "3006", "3007", "3008", "3009", "3010", "3011", "3012", "3013",
                "recipient-v", "acknowledged", "push-v", "/next-v", "forgotten-v", "json-v",
            ])
    }

    @Test("a device, topics, a topic and the log")
    func auditPages() {
        var device = ConsoleView.Device(token: "token-v", at: "at-v")
        device.error = "error-v"
        device.audit = .init(
            token: "audit-token-v", registered: true, atSeq: 4001, atTime: "at-time-v", acknowledgedThroughSeq: 4002,
            registrations: [Self.interval(4003, 4004)],
            subscriptions: [.init(topic: "subscribed-topic-v", held: Self.interval(4005, nil))],
            topics: [.init(name: "topic-name-v", encoded: "topic-encoded-v")], platform: "platform-v",
            appId: "app-id-v", deliveryCount: 4006, deliveriesCut: true, shownDeliveries: 4007,
            deliveries: [
                .init(
                    time: "delivered-v", messageId: "4008", kind: "kind-v", target: "delivery-target-v",
                    acknowledged: false, push: "push-v")
            ],
            hasAPNsTokens: true,
            apnsTokens: [.init(apnsToken: "apns-token-v", sandbox: true, held: Self.interval(4009, 4010))])
        expectAll(
            render("device", device),
            [
                "token-v", "at-v", "error-v", "audit-token-v", "4001", "at-time-v", "4002", "4003", "time-4003", "4004",
                "time-4004", "subscribed-topic-v", "4005", "still subscribed", "topic-name-v", "topic-encoded-v",
                "platform-v", "app-id-v", "4006", "4007", "delivered-v", "4008", "delivery-target-v", "not yet",
                "push-v", "apns-token-v", "(sandbox)", "4009", "4010",
            ])
        expectAll(
            render(
                "topics",
                ConsoleView.Topics(
                    byName: true, topics: [.init(name: "row-name-v", encoded: "row-encoded-v", subscribers: 5001)],
                    next: "/next-v")),
            ["row-name-v", "row-encoded-v", "5001", "/next-v", "sort by subscribers"])
        var topic = ConsoleView.Topic(name: "name-v", encoded: "encoded-v", at: "at-v")
        topic.error = "error-v"
        topic.atSeq = 6001
        topic.atTime = "at-time-v"
        topic.count = 6002
        topic.members = ["member-v"]
        topic.next = "/next-v"
        topic.chart = "<svg id=\"chart-v\"></svg>"
        topic.chartCaption = "caption-v"
        expectAll(
            render("topic", topic),
            [
                "name-v", "encoded-v", "at-v", "error-v", "6001", "at-time-v", "6002", "member-v", "/next-v",
                "<svg id=\"chart-v\"></svg>", "caption-v",
            ])
        var log = ConsoleView.Log(
            token: "token-v", topic: "topic-v", from: "from-v", to: "to-v",
            kinds: [.init(value: "value-v", label: "label-v", selected: true)])
        log.error = "error-v"
        log.events = [
            .init(seq: 7001, time: "time-v", kind: "kind-v", detail: "detail-v", hash: "hash-v", previous: "previous-v")
        ]
        log.next = "/next-v"
        expectAll(
            render("log", log),
            [
                "token-v", "topic-v", "from-v", "to-v", "value-v", "label-v", "selected", "error-v", "7001", "time-v",
                "kind-v", "detail-v", "hash-v", "previous-v", "/next-v",
            ])
    }

    @Test("sign-in and not-found; a signed-out page has no navigation")
    func framePages() {
        let signIn =
            Self.library.render(
                ConsoleView.Page(title: "title-v0", visitor: nil, content: ConsoleView.SignIn(error: "error-v")),
                withTemplate: "sign-in") ?? ""
        #expect(signIn.contains("error-v") && signIn.contains("title-v0"))
        #expect(!signIn.contains("Sign out"))
        expectAll(render("not-found", ConsoleView.NotFound(detail: "detail-v")), ["detail-v", "Sign out"])
    }
}
