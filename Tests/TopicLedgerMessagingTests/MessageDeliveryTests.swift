import Foundation
import LedgerTestSupport
import Testing

@testable import TopicLedgerMessaging
import HTTPTypes

@Suite("TopicLedgerMessaging: messages against the real server", .timeLimit(.minutes(2)))
struct MessageDeliveryTests {
    /// Takes `count` messages from `sequence`'s iterator.
    static func take(_ count: Int, from iterator: inout MessageSequence.Iterator) async throws -> [RemoteMessage] {
        var messages: [RemoteMessage] = []
        while messages.count < count, let message = try await iterator.next() { messages.append(message) }
        return messages
    }

    @Test("a stream cut in the middle of a message resumes from Last-Event-ID: nothing lost, nothing twice")
    func streamCutMidMessage() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            let messaging = try Messaging(configuration: server.messagingConfiguration(port: admin.port))
            try await messaging.subscribe(toTopic: "news")
            var sent: [String] = []
            for index in 0..<3 {
                sent.append(
                    try await admin.send(
                        #"{"topic":"news","data":{"n":"\#(index)","pad":"\#(String(repeating: "x", count: 200))"}}"#))
            }
            // The first stream's body: "retry: 1000\n\n" (13 bytes), then the first event and half of the second.
            let token = try #require(messaging.registrationToken)
            let firstEvent = 13 + 400
            server.front.on(.get, "messages:stream", .cutAfter(bytes: firstEvent + 150))
            var iterator = messaging.messages().makeAsyncIterator()
            let received = try await Self.take(3, from: &iterator)
            #expect(received.map(\.messageID) == sent)
            #expect(received.map { $0.appData["n"] } == ["0", "1", "2"])
            let streams = server.front.requests(.get, "messages:stream")
            #expect(streams.count >= 2)
            if streams.count >= 2 {
                #expect(streams[0].headers[.init("Last-Event-ID")!] == nil)
                #expect(streams[1].headers[.init("Last-Event-ID")!] == received[0].cursor)
            }
            // Acknowledging the last one acknowledges all: the server has nothing left for the device.
            try await messaging.acknowledge(received[2])
            #expect(try await admin.undelivered(token) == [])
        }
    }

    @Test("a message is acknowledged only when the app asks for the next: one whose handler never returned comes again")
    func atLeastOnce() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            let messaging = try Messaging(configuration: server.messagingConfiguration(port: admin.port))
            try await messaging.subscribe(toTopic: "news")
            let token = try #require(messaging.registrationToken)
            let first = try await admin.send(#"{"topic":"news","data":{"n":"1"}}"#)
            do {
                var iterator = messaging.messages().makeAsyncIterator()
                #expect(try await iterator.next()?.messageID == first)
                // The app is killed while handling it: the iterator goes away without another next().
            }
            #expect(try await admin.undelivered(token) == [first])
            let second = try await admin.send(#"{"topic":"news","data":{"n":"2"}}"#)
            var iterator = messaging.messages().makeAsyncIterator()
            #expect(try await Self.take(2, from: &iterator).map(\.messageID) == [first, second])
            // Asking for a third acknowledges the second (the loop has caught up); none arrives within the wait.
            let waiting = Task { [iterator] in
                var iterator = iterator
                return try await iterator.next()
            }
            #expect(try await eventually { try await admin.undelivered(token) == [] })
            waiting.cancel()
            #expect(try await waiting.value == nil)
        }
    }

    @Test("when the stream cannot be opened (a proxy answers 404 HTML), the library long-polls")
    func longPollFallback() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            server.front.on(
                .get, "messages:stream", times: 100,
                .status(404, body: "<html>no such thing</html>", contentType: "text/html"))
            let messaging = try Messaging(configuration: server.messagingConfiguration(port: admin.port))
            try await messaging.subscribe(toTopic: "news")
            let waiting = Task {
                var iterator = messaging.messages().makeAsyncIterator()
                return try await Self.take(2, from: &iterator)
            }
            let first = try await admin.send(#"{"topic":"news","notification":{"title":"one"}}"#)
            let second = try await admin.send(#"{"topic":"news","notification":{"title":"two"}}"#)
            let received = try await waiting.value
            #expect(received.map(\.messageID) == [first, second])
            #expect(received.map { $0.notification?.title } == ["one", "two"])
            #expect(server.front.requests(.get, "messages:stream").count == 1)
            #expect(server.front.requests(.get, "/messages").count >= 2)
        }
    }

    @Test("a silent push arrives with content-available and no alert; a visible one with its alert, badge and data")
    func silentAndVisiblePush() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            let messaging = try Messaging(configuration: server.messagingConfiguration(port: admin.port))
            try await messaging.subscribe(toTopic: "sync")
            let silent = try await admin.send(
                #"{"topic":"sync","data":{"changed":"inbox"},"apns":{"payload":{"aps":{"content-available":1}}}}"#)
            let visible = try await admin.send(
                #"{"topic":"sync","notification":{"title":"Hi","body":"There"},"data":{"k":"v"},"#
                    + #""apns":{"payload":{"aps":{"badge":3,"sound":"chime.caf"}}}}"#)
            var iterator = messaging.messages().makeAsyncIterator()
            let received = try await Self.take(2, from: &iterator)
            try #require(received.count == 2)
            #expect(received[0].messageID == silent)
            #expect(received[0].isContentAvailable)
            #expect(received[0].notification == nil)
            #expect(received[0].pushType == "background")
            #expect(received[0].appData == ["changed": "inbox"])
            #expect(received[0].from == "/topics/sync")
            #expect(received[1].messageID == visible)
            #expect(!received[1].isContentAvailable)
            #expect(received[1].notification == RemoteMessage.Notification(title: "Hi", body: "There"))
            #expect(received[1].payload["aps"]?["badge"]?.intValue == 3)
            #expect(received[1].payload["aps"]?["sound"]?.stringValue == "chime.caf")
            #expect(received[1].appData == ["k": "v"])
        }
    }

    @Test("an Android device gets RemoteMessage's shape: data and notification")
    func androidShape() async throws {
        let server = LibraryServer()
        try await server.run { admin in
            let messaging = try Messaging(
                configuration: server.messagingConfiguration(platform: .android, port: admin.port))
            try await messaging.subscribe(toTopic: "news")
            let id = try await admin.send(
                #"{"topic":"news","notification":{"title":"T"},"data":{"k":"v"},"android":{"notification":{"channel_id":"c"}}}"#
            )
            var iterator = messaging.messages().makeAsyncIterator()
            let message = try #require(try await iterator.next())
            #expect(message.messageID == id)
            #expect(message.appData == ["k": "v"])
            #expect(message.notification?.title == "T")
            #expect(message.payload["notification"]?["channelId"]?.stringValue == "c")
        }
    }
}

@Suite("Server-Sent Events parser")
struct ServerSentEventParserTests {
    @Test(
        "events split at blank lines in any line ending; comments and unknown fields ignored; a cut event never dispatched"
    )
    func parses() throws {
        var parser = ServerSentEventParser()
        let text =
            "retry: 1000\n\n: keep-alive\n\nid: 7\r\nevent: message\r\ndata: {\"a\":1}\r\n\r\nid: 8\rdata: x\rdata: y\r\rid: 9\ndata: cut"
        var events: [ServerSentEvent] = []
        // Byte by byte: a chunk boundary can fall anywhere, CRLF included.
        for byte in Array(text.utf8) { events += try parser.feed([byte]) }
        #expect(
            events == [
                ServerSentEvent(id: "7", event: "message", data: #"{"a":1}"#),
                ServerSentEvent(id: "8", event: "message", data: "x\ny"),
            ])
    }
}
