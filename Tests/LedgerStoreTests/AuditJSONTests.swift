import Foundation
import LedgerCore
import Testing

@testable import LedgerQueries
@testable import LedgerStore
import LedgerTestSupport

/// The audit shapes as `Encodable` types: what JSONSerialization wrote before, key for key.
@Suite("AuditJSON shapes", .offThePool)
struct AuditJSONTests {
    func object(_ value: some Encodable) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: AuditJSON.data(value)) as? [String: Any])
    }

    @Test("a replay not yet recorded says null for what the audience event will record; the target is keyed by kind")
    func replayBeforeItsAudience() throws {
        let replay = AuditJSON.Replay(
            name: "projects/p/messages/7", messageId: "7", seq: 3, time: "2026-11-24T00:00:00.000000Z",
            target: AuditJSON.Target(.condition("'a' in topics")), precedence: "standard", recipients: ["t1"],
            recipientDevices: [4], recipientCount: 1, recipientDigest: "00", digestVersion: 2, digestRecomputable: true,
            recordedCount: nil, recordedDigest: nil, audienceSeq: nil,
            matchesRecord: false, erasedRecipients: 0, acknowledgedCount: 0, acknowledgedRecipients: [],
            pushCounts: nil, pushes: [],
            message: nil, contentForgotten: nil)
        let json = try object(replay)
        for key in ["recordedCount", "recordedDigest", "audienceSeq"] { #expect(json[key] is NSNull, "\(key)") }
        #expect(json["message"] == nil)
        #expect(json["nextPageToken"] == nil)
        #expect(json["pushCounts"] == nil, "no recipient held an APNs token")
        #expect(json["pushes"] as? [Any] != nil)
        #expect(json["target"] as? [String: String] == ["condition": "'a' in topics"])
        #expect(Set(json.keys).count == 20)
        #expect(json["recipientDevices"] as? [Int] == [4] && json["digestVersion"] as? Int == 2)
        let text = String(decoding: try AuditJSON.data(replay), as: UTF8.self)
        #expect(text.hasPrefix(#"{"acknowledgedCount":0,"acknowledgedRecipients":[],"audienceSeq":null,"#))
        #expect(text.contains(#""name":"projects/p/messages/7""#))
    }

    @Test("moments before the first event have no time; intervals that still hold have no until")
    func momentsAndIntervals() throws {
        #expect(try object(AuditJSON.Moment(seq: 0, time: nil)) as NSDictionary == ["seq": 0] as NSDictionary)
        let open = try object(AuditJSON.Interval(fromSeq: 2, fromTime: "t2", untilSeq: nil, untilTime: nil))
        #expect(open as NSDictionary == ["fromSeq": 2, "fromTime": "t2"] as NSDictionary)
        let held = AuditJSON.Interval(fromSeq: 2, fromTime: "t2", untilSeq: 5, untilTime: "t5")
        let closed = try object(AuditJSON.Instance.Subscription(topic: "news", held: held))
        #expect(
            closed as NSDictionary
                == ["topic": "news", "fromSeq": 2, "fromTime": "t2", "untilSeq": 5, "untilTime": "t5"] as NSDictionary)
    }
}
