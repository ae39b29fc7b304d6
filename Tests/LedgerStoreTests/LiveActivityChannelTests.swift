import Foundation
import LedgerCore
import LedgerQueries
import LedgerStore
import LedgerTestSupport
import Testing

@Suite("A topic's broadcast channel in the ledger: events, the fold, the projection", .offThePool)
struct LiveActivityChannelTests {
    let scores = try! TopicName("scores")
    let weather = try! TopicName("weather")

    func created(_ topic: TopicName, _ id: String, policy: UInt32 = 0) -> LedgerOperation {
        .recordLiveActivityChannelCreated(
            LiveActivityChannelChange(
                topic: topic, channelID: id, messageStoragePolicy: policy, apnsRequestID: "r-\(id)"))
    }

    func deleted(_ topic: TopicName, _ id: String) -> LedgerOperation {
        .recordLiveActivityChannelDeleted(
            LiveActivityChannelChange(topic: topic, channelID: id, apnsRequestID: "d-\(id)", reason: "deleted"))
    }

    func append(_ ledger: Ledger, _ operation: LedgerOperation) async throws -> OperationOutcome {
        try await ledger.append(WriteRequest(actor: "admin", requestID: UUID().uuidString, operations: [operation]))
            .outcomes[0]
    }

    @Test("created and deleted are events; the projection, the in-memory fold and a rebuild agree")
    func lifecycle() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let ledger = try openTestLedger(directory)
        guard
            case .appended(let first) = try await append(ledger, created(scores, "AAAAAAAAAAAAAAAAAAAAAA==", policy: 1))
        else { Issue.record("not appended"); return }
        _ = try await append(ledger, created(weather, "BBBBBBBBBBBBBBBBBBBBBB=="))
        // A second channel for a topic that has one, and the deletion of a channel the topic does not have, are
        // refused and append nothing.
        #expect(try await append(ledger, created(scores, "CCCCCCCCCCCCCCCCCCCCCC==")).rejection?.code == .alreadyExists)
        #expect(try await append(ledger, deleted(scores, "CCCCCCCCCCCCCCCCCCCCCC==")).rejection?.code == .notFound)
        let channel = try ledger.read { try $0.liveActivityChannel(of: scores) }
        #expect(
            channel
                == LiveActivityChannel(
                    topic: scores, channelID: "AAAAAAAAAAAAAAAAAAAAAA==", messageStoragePolicy: 1, createdSeq: first))
        #expect(try ledger.read { try $0.liveActivityChannelCount() } == 2)
        _ = try await append(ledger, deleted(weather, "BBBBBBBBBBBBBBBBBBBBBB=="))
        #expect(try ledger.read { try $0.liveActivityChannel(of: weather) } == nil)
        #expect(try ledger.read { try $0.liveActivityChannels() }.map(\.topic) == [scores])
        let folded = try #require(try foldLog(ledger).last)
        #expect(folded.liveActivityChannels == [scores: try #require(channel)])
        #expect(try ledger.read { try $0.head().seq } == 3)
        // The log says what happened, in the clear (a channel id is not a personal identifier: not sealed).
        let kinds = try ledger.readLog { snapshot in
            var kinds: [LedgerEvent.Kind] = []
            try snapshot.forEachEvent { event, _ in
                kinds.append(event.kind)
                if case .liveActivityChannelCreated(let change) = event.body, change.topic == scores {
                    #expect(change.apnsRequestID == "r-AAAAAAAAAAAAAAAAAAAAAA==")
                    #expect(event.seals?.isEmpty ?? true)
                }
                return true
            }
            return kinds
        }
        #expect(kinds == [.liveActivityChannelCreated, .liveActivityChannelCreated, .liveActivityChannelDeleted])
        #expect(try ledger.verify().isSound)
        try ledger.rebuildProjections()
        #expect(try ledger.verify().isSound)
        #expect(try ledger.read { try $0.liveActivityChannels() } == [try #require(channel)])
    }

    @Test("the codec round-trips both kinds; the text and JSON of the log name the channel")
    func codec() throws {
        for body: LedgerEvent.Body in [
            .liveActivityChannelCreated(
                LiveActivityChannelChange(
                    topic: scores, channelID: "dGVzdA==", messageStoragePolicy: 1, apnsRequestID: "r-1")),
            .liveActivityChannelDeleted(
                LiveActivityChannelChange(
                    topic: scores, channelID: "dGVzdA==", apnsRequestID: "r-2", reason: "APNs: ChannelNotRegistered")),
        ] {
            let event = LedgerEvent(
                seq: 7, time: LedgerTime(microseconds: 1_765_000_000_000_000), actor: "admin", requestID: "q",
                body: body, seals: [])
            let decoded = try EventCodec.decode(EventCodec.encode(event))
            #expect(decoded == event)
            let line = EventText.line(event, hash: [UInt8](repeating: 0, count: 32))
            // Quoted as every value holding `=` is (EventText.quoted): base64 padding cannot split the line.
            #expect(line.contains(#"topic=scores"#) && line.contains(#"channel="dGVzdA==""#), "\(line)")
        }
    }
}
