import Foundation
import LedgerServer
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
}
