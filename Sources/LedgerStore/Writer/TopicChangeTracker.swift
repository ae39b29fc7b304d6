import Foundation
import Synchronization
import LedgerCore

/// For each topic, a seq through which its membership may last have changed: the writer notes every batch's
/// subscribes, unsubscribes and unregistrations before the batch's sends reach the audience recorder, and
/// the recorder asks before reading a topic's members (``RecipientDigestMemo/unchangedDigest(of:at:changes:)``).
///
/// Answers err one way only — later than the real change, never earlier: topics share 4,096 buckets by the
/// hash of their name, a batch's changes are all dated at its last seq, an unregistration (which leaves every
/// topic of its instance) dates every topic, and everything before the ledger was opened is dated at its
/// head then. A late answer costs a read of the members that was not needed; an early one would reuse a
/// stale digest, which no path here can give.
///
/// Its own lock, not the memo's: the recorder holds the memo's while it hashes, and the writer must not wait.
final class TopicChangeTracker: Sendable {
    static let bucketCount = 4096

    private struct Dates {
        var buckets: [UInt64]
        /// A seq through which every topic may have changed.
        var everyTopic: UInt64
    }

    private let dates: Mutex<Dates>

    /// - Parameter head: the ledger's head seq when it was opened (changes before it are unknown here).
    init(head: UInt64) {
        dates = Mutex(Dates(buckets: Array(repeating: 0, count: Self.bucketCount), everyTopic: head))
    }

    /// Notes the membership changes `requests` may have made, dated `seq` (the batch's last seq).
    func noteChanges(of requests: [WriteRequest], through seq: UInt64) {
        dates.withLock { dates in Self.note(requests, through: seq, in: &dates) }
    }

    /// Notes that any topic's membership may have changed through `seq` (a replicated block, whose
    /// requests are not known here).
    func noteChangesOfEveryTopic(through seq: UInt64) {
        dates.withLock { $0.everyTopic = max($0.everyTopic, seq) }
    }

    private static func note(_ requests: [WriteRequest], through seq: UInt64, in dates: inout Dates) {
        var last: TopicName?
        for request in requests {
            for operation in request.operations {
                switch operation {
                case .subscribe(_, let topic, _, _), .unsubscribe(_, let topic, _, _):
                    // A batchAdd names one topic a thousand times: hash it once.
                    guard topic != last else { continue }
                    last = topic
                    let bucket = Self.bucket(of: topic)
                    dates.buckets[bucket] = max(dates.buckets[bucket], seq)
                case .unregister, .erase:
                    dates.everyTopic = max(dates.everyTopic, seq)
                case .register, .send, .recordAudience, .acknowledge, .setAPNsToken, .clearAPNsToken,
                    .recordPushProgress, .forgetContents, .recordLiveActivityChannelCreated,
                    .recordLiveActivityChannelDeleted, .followLiveActivity, .unfollowLiveActivity, .setPushToStartToken,
                    .endLiveActivities:
                    break
                }
            }
        }
    }

    /// A seq at or after the last change of `topic`'s membership.
    func lastChange(of topic: TopicName) -> UInt64 {
        let bucket = Self.bucket(of: topic)
        return dates.withLock { max($0.everyTopic, $0.buckets[bucket]) }
    }

    private static func bucket(of topic: TopicName) -> Int { topic.rawValue.hashValue & (bucketCount - 1) }
}

extension TopicChangeTracker: LedgerCommitObserver {
    /// Dates the membership changes of what was released, before its sends reach the recorder (``CommitRelease``).
    func released(_ commit: ReleasedCommit) {
        switch commit.changes {
        case .of(let requests): noteChanges(of: requests, through: commit.through)
        case .everyTopic: noteChangesOfEveryTopic(through: commit.through)
        }
    }
}
