import Foundation
import LMDBKit
import LedgerCore
import LedgerStore
import LedgerTestSupport
import Synchronization
import Testing

/// Appends `requests` one after another and returns the receipts.
func appendAll(_ requests: [WriteRequest], to ledger: Ledger) async throws -> [WriteReceipt] {
    var receipts: [WriteReceipt] = []
    for request in requests { receipts.append(try await ledger.append(request)) }
    return receipts
}

/// The in-memory fold of the whole log (the independent reference).
func foldLog(_ ledger: Ledger, through: UInt64 = .max) throws -> [InMemoryLedgerState] {
    try ledger.readLog { snapshot throws in
        var states: [InMemoryLedgerState] = [InMemoryLedgerState()]
        var state = InMemoryLedgerState()
        try snapshot.forEachEvent(through: through) { event, _ in
            state.apply(event)
            states.append(state)
            return true
        }
        return states
    }
}

/// Current or point-in-time state as the store's projections answer it, keyed by token and topic name.
struct ObservedState: Equatable, CustomStringConvertible {
    var registered: Set<String> = []
    var topicsByToken: [String: Set<String>] = [:]
    var membersByTopic: [String: Set<String>] = [:]
    /// Each token's APNs token (hex, `+sandbox` for a sandbox one).
    var apnsTokens: [String: String] = [:]

    var description: String {
        "registered=\(registered.sorted()) topics=\(topicsByToken) members=\(membersByTopic) apns=\(apnsTokens)"
    }

    static func describe(_ token: APNsDeviceToken) -> String { token.hex + (token.sandbox ? "+sandbox" : "") }

    /// What `state` says, restricted to `tokens` and `topics`.
    init(_ state: InMemoryLedgerState, tokens: [RegistrationToken], topics: [TopicName]) {
        for token in tokens {
            if state.isRegistered(token) { registered.insert(token.rawValue) }
            if let apnsToken = state.apnsToken(of: token) { apnsTokens[token.rawValue] = Self.describe(apnsToken) }
            let held = state.topics(of: token)
            if !held.isEmpty { topicsByToken[token.rawValue] = Set(held.map(\.rawValue)) }
        }
        for topic in topics {
            let members = state.members(of: topic)
            if !members.isEmpty { membersByTopic[topic.rawValue] = Set(members.map(\.rawValue)) }
        }
    }

    /// What the store's snapshot says at `seq` (now, when `nil`).
    init(_ snapshot: LedgerSnapshot, at seq: UInt64?, tokens: [RegistrationToken], topics: [TopicName]) throws {
        for token in tokens {
            guard let instance = try snapshot.instanceID(of: token) else { continue }
            if try snapshot.isRegistered(instance, at: seq) { registered.insert(token.rawValue) }
            if let apnsToken = try snapshot.apnsToken(of: instance, at: seq ?? snapshot.head().seq) {
                apnsTokens[token.rawValue] = Self.describe(apnsToken)
            }
            let held = try snapshot.topics(of: instance, at: seq).map { try snapshot.topicName(of: $0)!.rawValue }
            if !held.isEmpty { topicsByToken[token.rawValue] = Set(held) }
        }
        for topic in topics {
            guard let id = try snapshot.topicID(of: topic) else { continue }
            let members = try snapshot.members(of: id, at: seq).map { try snapshot.token(of: $0)!.rawValue }
            if !members.isEmpty { membersByTopic[topic.rawValue] = Set(members) }
            if seq == nil { #expect(try snapshot.subscriberCount(of: id) == members.count) }
        }
    }
}

/// Every key and value of every database in the ledger's environment, for byte-for-byte comparisons.
///
/// `instanceTopics` is dumped as one database with `recentMemberships`, sorted, each entry of the latter
/// (`partition → since ‖ instance ‖ topic`) as `instanceTopics` would hold it (`instance → topic ‖ since`): the
/// live writer keeps new memberships in the second until it moves them (`RecentMemberships`), a rebuild writes
/// all to the first, and together they are the instance side. A membership in both would appear twice.
func rawDump(directory: String, databases: [String]) throws -> [String: [[UInt8]]] {
    let environment = try LMDBEnvironment(path: directory)
    var dump: [String: [[UInt8]]] = [:]
    try environment.read { txn throws in
        for name in databases {
            var entries: [[UInt8]] = []
            try txn.withCursor(try txn.openDatabase(name)) { cursor in
                try cursor.forEach { entry in
                    entries.append(Array(entry.key) + [0xFF, 0xFE] + Array(entry.value))
                    return true
                }
            }
            if name == "instanceTopics" {
                try txn.withCursor(try txn.openDatabase("recentMemberships")) { cursor in
                    try cursor.forEach { entry in
                        let value = Array(entry.value)
                        guard value.count == 16 else {
                            Issue.record(
                                "a recentMemberships value of \(value.count) bytes, not since ‖ instance ‖ topic")
                            return false
                        }
                        entries.append(Array(value[8..<12]) + [0xFF, 0xFE] + Array(value[12..<16] + value[0..<8]))
                        return true
                    }
                }
                entries.sort { $0.lexicographicallyPrecedes($1) }
            }
            dump[name] = entries
        }
    }
    return dump
}

/// Every database derived from the log (what `rebuild` clears and writes again); `instanceTopics` stands for
/// the instance side's two databases (``rawDump(directory:databases:)``).
let projectionDatabases = [
    "tokens", "instances", "universe", "universeHistory", "topicIDs", "topicNames", "instanceTopics", "topicMembers",
    "instanceTopicHistory", "topicMemberHistory", "messages", "sends", "acknowledged", "merkle", "apnsTokens",
    "apnsTokenHistory", "pushProgress", "pushFailures",
]

/// Runs `body` on the ledger's raw log database (the ledger must be closed and released).
func withRawLog<R>(directory: String, _ body: (LMDBTransaction, LMDBDatabase) throws -> R) throws -> R {
    let environment = try LMDBEnvironment(path: directory)
    return try environment.write { txn in try body(txn, try txn.openDatabase("log")) }
}

/// A gate that accepts every block and keeps it, as etcd would, for another node to apply.
final class KeepingGate: ReplicationGate {
    private let blocks = Mutex<[ReplicatedBlock]>([])

    func replicate(_ block: ReplicatedBlock) throws { blocks.withLock { $0.append(block) } }

    func confirmLeadership() throws {}

    /// The blocks kept since the last call.
    func take() -> [ReplicatedBlock] {
        blocks.withLock { blocks in
            defer { blocks = [] }; return blocks
        }
    }
}

/// The devices the erasure tests erase and keep (tokens of the shape the server issues), the APNs token the erased
/// one holds, and their requests.
enum ErasureFixture {
    static let erased = try! RegistrationToken(
        "cAAAAAAAAAAAAAAAAAAAAA:APA91b-erase-me-0123456789abcdefghijklmnopqrstuvwxyz")
    static let kept = try! RegistrationToken(
        "dBBBBBBBBBBBBBBBBBBBBB:APA91b-keep-me-0123456789abcdefghijklmnopqrstuvwxyz")
    static let apnsToken = try! APNsDeviceToken(bytes: (0..<32).map { UInt8(0xA0 + $0 % 16) }, sandbox: false)

    static func request(_ operations: [LedgerOperation], actor: String = "admin") -> WriteRequest {
        WriteRequest(actor: actor, requestID: UUID().uuidString, operations: operations)
    }
}
