import Foundation
import LedgerServer
import LedgerTestSupport
import Testing
import HTTPTypes

@Suite("Metrics")
struct MetricsTests {
    @Test("/metrics counts requests by route pattern and status, commits, and events; never tokens")
    func exposition() async throws {
        try await TestServer().run { client in
            let token = try await client.registerDevice()
            _ = try await client.call(
                .post, "/v1/projects/demo-project/registrations/\(token)/topicSubscriptions?topicName=news", body: "{}")
            _ = try await client.call(.post, "/v1/projects/demo-project/messages:send", body: #"{"message":{}}"#)
            let reply = try await client.call(.get, "/metrics", headers: [:])
            #expect(reply.status == .ok)
            let text = reply.text
            #expect(
                text.contains(
                    #"ledger_http_requests_total{route="/v1/projects/{project}/registrations/{token}/topicSubscriptions",method="POST",status="200"} 1"#
                ), "\(text)")
            #expect(
                text.contains(
                    #"ledger_http_requests_total{route="/v1/projects/{project}/messages:send",method="POST",status="400"} 1"#
                ))
            #expect(text.contains("ledger_operations_committed_total 2"))
            #expect(text.contains("ledger_commit_duration_seconds_count 2"))
            #expect(text.contains("ledger_group_commit_requests_count 2"))
            #expect(text.contains("ledger_events 2"))
            // The send was refused: no audience is owed.
            #expect(text.contains("ledger_audiences_pending 0"))
            #expect(!text.contains(token))
            // Unauthenticated: no project id anywhere.
            #expect(!text.contains("demo-project"))
            // A project's own series need its admin or auditor key.
            let anonymous = try await client.call(.get, "/v1/projects/demo-project/metrics", headers: [:])
            #expect(anonymous.status == .unauthorized)
            let device = try await client.call(
                .get, "/v1/projects/demo-project/metrics", headers: TestServer.Client.device)
            #expect(device.status == .forbidden)
            let own = try await client.call(
                .get, "/v1/projects/demo-project/metrics", headers: TestServer.Client.auditor)
            #expect(own.status == .ok)
            #expect(own.text.contains("ledger_project_events 2") && own.text.contains("ledger_project_subscriptions 1"))
        }
    }

    @Test(
        "/metrics tells a compaction owed after an erasure, the fullest map and the data directory's disk, with every expiry outcome at zero"
    )
    func storage() async throws {
        let server = TestServer()
        let directory = server.directory.path
        try await server.run { client in
            let token = try await client.registerDevice()
            func gauge(_ name: String) async throws -> Double? {
                let text = try await client.call(.get, "/metrics", headers: [:]).text
                return text.split(separator: "\n").first { $0.hasPrefix(name + " ") }.flatMap {
                    Double($0.dropFirst(name.count + 1))
                }
            }
            #expect(try await gauge("topicledger_compactions_owed") == 0)
            let ratio = try #require(try await gauge("topicledger_map_used_ratio"))
            #expect(ratio > 0 && ratio < 0.001, "a new ledger's file is a few pages of 1 TiB")
            let available = try #require(try await gauge("topicledger_disk_available_bytes"))
            let size = try #require(try await gauge("topicledger_disk_size_bytes"))
            #expect(available > 0 && available <= size)
            for outcome in ["completed", "skipped", "failed"] {
                #expect(try await gauge(#"ledger_expiry_sweeps_total{outcome="\#(outcome)"}"#) == 0)
            }
            // A file where the compacting copy's directory goes: the erasure stands, its compaction is owed.
            let blocker = directory + "/demo-project/.compacting"
            #expect(FileManager.default.createFile(atPath: blocker, contents: Data("x".utf8)))
            let erased = try await client.call(
                .post, "/v1/projects/demo-project/registrations/\(token):erase", body: #"{"reason":"test"}"#)
            #expect(erased.status == .serviceUnavailable)
            #expect(try await gauge("topicledger_compactions_owed") == 1)
            try FileManager.default.removeItem(atPath: blocker)
            _ = try await client.registerDevice()
            #expect(try await gauge("topicledger_compactions_owed") == 0)
        }
    }
}
