import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import Testing

/// The `activity` database as expiry reads it, and as a cluster's replicas exchange it by device number.
@Suite("Activity", .offThePool)
struct ActivityTests {
    @Test("activity by token and by device number keeps the latest time; silent devices come with their numbers")
    func activityByDevice() async throws {
        try await withTestLedger { ledger in
            let tokens = try (0..<3).map { try RegistrationToken("activity-\($0):APA91b") }
            _ = try await ledger.append(
                WriteRequest(
                    actor: "t", requestID: "r", operations: tokens.map { .register($0, platform: nil, appID: nil) }))
            try ledger.noteActivity([tokens[0]], at: 1_000)
            // Another replica heard device 1 later and device 2 once; an older time and a zero move nothing.
            try ledger.noteActivity(ofDevices: [(1, 2_000), (2, 1_500), (1, 1_200), (3, 0)])
            #expect(
                try ledger.lastActivity(ofDevices: [1, 2, 3, 99]).map { [Int64($0.device), $0.lastActive] } == [
                    [1, 2_000], [2, 1_500],
                ])
            try ledger.noteActivity([tokens[0]], at: 1_900)
            #expect(try ledger.lastActivity(ofDevices: [1]).first?.lastActive == 2_000, "a later time never moves back")
            // Device 3 was never heard from: it counts from its registration (now), so only a cutoff past now finds it.
            let now = Int64(Date().timeIntervalSince1970)
            let silent = try ledger.silentRegistrations(before: 1_800, limit: 10)
            #expect(
                silent.map(\.device) == [2] && silent.first?.token == tokens[1] && silent.first?.lastActive == 1_500)
            let all = try ledger.silentRegistrations(before: now + 10, limit: 10)
            #expect(all.map(\.device) == [2, 1, 3], "the stalest first")
        }
    }
}
