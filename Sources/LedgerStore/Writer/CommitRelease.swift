import LedgerCore

/// What one commit released to those who act on committed events: a group-commit batch once it is durable (on a
/// cluster's leader that commits ahead of etcd, once etcd holds it), or a block a replica applied from its
/// cluster's log.
public struct ReleasedCommit: Sendable {
    /// Whose topic memberships a commit may have changed.
    enum MembershipChanges: Sendable {
        /// Those the operations of these requests name (an unregistration or an erasure: every topic).
        case of([WriteRequest])
        /// Any topic's (a replicated block, whose requests are not known here).
        case everyTopic
    }

    /// The last seq the commit appended.
    public let through: UInt64
    /// The seqs of the sends it appended, in order.
    public let sends: [UInt64]
    let changes: MembershipChanges
    /// Its sends whose `audience` event was not appended with them (``WriteReceipt/recordedAudiences``).
    let unrecordedSends: [PendingAudience]

    /// What a batch released, from its requests and what each was told; `nil` when it appended nothing.
    init?(batch: [WriteRequest], results: [Result<WriteReceipt, any Error>]) {
        var through: UInt64?
        var sends: [UInt64] = []
        var unrecorded: [PendingAudience] = []
        for case .success(let receipt) in results {
            for outcome in receipt.outcomes {
                guard let seq = outcome.seq else { continue }
                through = max(through ?? seq, seq)
                if case .sent(_, let messageID) = outcome {
                    sends.append(seq)
                    if receipt.recordedAudiences[messageID] == nil {
                        unrecorded.append(PendingAudience(messageID: messageID, sendSeq: seq))
                    }
                }
            }
            for seq in receipt.recordedAudiences.values { through = max(through ?? seq, seq) }
        }
        guard let through else { return nil }
        self.init(through: through, sends: sends, changes: .of(batch), unrecordedSends: unrecorded)
    }

    init(through: UInt64, sends: [UInt64], changes: MembershipChanges, unrecordedSends: [PendingAudience]) {
        self.through = through
        self.sends = sends
        self.changes = changes
        self.unrecordedSends = unrecordedSends
    }
}

/// One who acts on what the ledger committed: the head's waiters, the topic change dates, the audience
/// recorder (all in LedgerStore), and a server's delivery, APNs outbox and metrics (``Ledger/Options/observer``).
///
/// Told by ``CommitRelease``, in commit order, on the thread that released the commit (the writer's, the
/// replica's that heard etcd take a block, or the one that applied a replicated block). An observer must be
/// quick and must not block: the next commit's release waits for it.
public protocol LedgerCommitObserver: Sendable {
    /// A group commit's transaction ended, before its requests hear of it: `requests` and `operations` in it, and
    /// how long it took. For metrics; nothing is released yet.
    func writerCommitted(requests: Int, operations: Int, duration: Duration)

    /// Events through `commit.through` are committed and what was asked of them may be answered.
    func released(_ commit: ReleasedCommit)
}

extension LedgerCommitObserver {
    public func writerCommitted(requests: Int, operations: Int, duration: Duration) {}
}

/// The one path every commit leaves by, whatever wrote it (a batch, an erasure, an audience, a replicated block),
/// before anyone is answered: it tells each observer, in the order given at construction.
///
/// The ledger's order is fixed (``Ledger``): the head rises first (a reader woken by it must find the events),
/// then the topics' membership changes are dated, and only then do the sends reach the audience recorder (a
/// send's audience must never be taken as unchanged across a change committed before it:
/// ``TopicChangeTracker``), and last the server's observer (delivery, the APNs outbox, metrics).
///
/// - Note: Thread-safe: the observers are fixed at construction.
final class CommitRelease: Sendable {
    private let observers: [any LedgerCommitObserver]

    init(_ observers: [any LedgerCommitObserver]) {
        self.observers = observers
    }

    /// Tells every observer that the commit's events are durable (and, ahead of a cluster, held by it).
    func release(_ commit: ReleasedCommit) {
        for observer in observers { observer.released(commit) }
    }

    /// Tells every observer how long a group commit's transaction took.
    func writerCommitted(requests: Int, operations: Int, duration: Duration) {
        for observer in observers {
            observer.writerCommitted(requests: requests, operations: operations, duration: duration)
        }
    }
}

/// The head's waiters (``Ledger/waitForHead(_:upTo:)``) as a commit observer: the level rises to what was released.
struct HeadRelease: LedgerCommitObserver {
    let waiters: Watermark

    func released(_ commit: ReleasedCommit) { waiters.advance(to: commit.through) }
}
