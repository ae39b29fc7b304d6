import LMDBKit
import LedgerCore
import Logging

/// Every send's `audience` event (SPEC §2.4): small ones are appended with their send (``BatchCommit``), the rest
/// by the recorder once the send is released (``AudienceRecorder``).
extension Ledger {
    /// Appends the `audience` events of the sends in `receipt` at once, stamped `time` (the store's clock
    /// when `nil`), and returns their outcomes. For ledgers opened without
    /// ``Options/recordsAudiences`` that still want every send recorded in a deterministic place: `ledger
    /// import` records each send's audience right after its request, with the request's time.
    @discardableResult
    public func recordAudiences(of receipt: WriteReceipt, time: LedgerTime?) async throws -> [OperationOutcome] {
        let sends = ReleasedCommit(batch: [], results: [.success(receipt)])?.unrecordedSends ?? []
        guard !sends.isEmpty else { return [] }
        // A reader's change dates miss what another process writes: nothing is computed for it (the append
        // below would refuse it anyway).
        guard writer != nil else {
            throw StoreError(.invalidArgument, "the ledger of \(project) is open read-only")
        }
        let records = try digestMemo.withLock { memo in
            try read { try $0.audienceRecords(sends, memo: memo, changes: topicChanges) }
        }
        return try await append(
            WriteRequest(
                actor: "ledger", requestID: "audience-\(RequestID.random())", time: time,
                operations: records.map { .recordAudience($0) })
        ).outcomes
    }

    /// Sends committed whose `audience` event is not appended yet (0 without the recorder).
    public var pendingAudiences: Int { audienceRecorder?.backlog ?? 0 }

    /// How many recorded audiences reused the recipient digest of an earlier send to the same target with
    /// exactly the same members (``RecipientDigestMemo``) — `unread` of them without reading the members,
    /// since none had changed — and how many were hashed from the device numbers.
    public var audienceDigestReuse: (reused: Int, unread: Int, hashed: Int) {
        digestMemo.withLock { ($0.hits + $0.unreadHits, $0.unreadHits, $0.misses) }
    }

    /// Gives every send without an `audience` event one (``Options/replication``: what a node does when it
    /// takes the lead of the project; a ledger of one node does it when it opens).
    public func recordMissingAudiences() throws {
        guard let audienceRecorder else { return }
        audienceRecorder.enqueue(try read { try $0.sendsWithoutAudience() })
    }

    /// Blocks until every send committed so far has its `audience` event (or its recording failed and was
    /// logged). For imports, tests and benchmarks; the server never needs to wait.
    public func waitForAudiences() {
        audienceRecorder?.waitUntilIdle()
    }

    /// Computes each released send's audience on its own thread and appends it through `writer`, which it holds
    /// weakly: the writer's release path reaches the recorder, and closing the ledger must free both.
    static func startRecorder(
        storage: LedgerStorage, writer: LockedValue<WeakWriter>, memo: LockedValue<RecipientDigestMemo>,
        changes: TopicChangeTracker, logger: Logger
    ) -> AudienceRecorder {
        AudienceRecorder(
            compute: { [environment = storage.environment, schema = storage.schema] sends in
                try memo.withLock { memo in
                    try environment.read {
                        try LedgerSnapshot(txn: $0, schema: schema).audienceRecords(sends, memo: memo, changes: changes)
                    }
                }
            },
            submit: { request in
                guard let target = writer.withLock({ $0.writer }) else {
                    return .failure(StoreError(.unavailable, "the ledger is closed"))
                }
                return target.submitAndWait(request)
            }, logger: logger)
    }
}

/// A weak reference to a ledger's writer (the audience recorder's, which the writer's release path reaches).
struct WeakWriter {
    weak var writer: LedgerWriter?
}
