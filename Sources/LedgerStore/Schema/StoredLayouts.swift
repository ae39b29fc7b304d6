import LMDBKit

// The fixed-size values of the ledger's databases (see ``LedgerSchema``), each read and written in one place.

/// A current-state entry of `instanceTopics`, `topicMembers` and `universe`: `id u32 ‖ since u64`.
struct StoredMembership: Equatable {
    static let size = 12
    /// The other side of the pair: the topic (in `instanceTopics`) or the instance.
    var id: UInt32
    /// The seq of the event that began it.
    var since: UInt64

    init(id: UInt32, since: UInt64) {
        self.id = id
        self.since = since
    }

    /// Reads the entry at `offset` of a run of entries (a page of duplicate values).
    init(_ bytes: UnsafeRawBufferPointer, at offset: Int = 0) {
        id = bytes.loadBigEndianUInt32(at: offset)
        since = bytes.loadBigEndianUInt64(at: offset + 4)
    }

    var encoded: PackedBytes { membershipValue(id, since: since) }
}

/// A closed interval of `instanceTopicHistory`, `topicMemberHistory` and `universeHistory`:
/// `id u32 ‖ start u64 ‖ end u64`, held after applying event `start` and no longer after `end`.
struct StoredInterval: Equatable {
    static let size = 20
    var id: UInt32
    var start: UInt64
    var end: UInt64

    init(_ bytes: UnsafeRawBufferPointer, at offset: Int = 0) {
        id = bytes.loadBigEndianUInt32(at: offset)
        start = bytes.loadBigEndianUInt64(at: offset + 4)
        end = bytes.loadBigEndianUInt64(at: offset + 12)
    }

    /// Whether the interval holds in the state at `seq`.
    func holds(at seq: UInt64) -> Bool { start <= seq && seq < end }
}

/// The `messages` value: `send seq u64 ‖ audience seq u64` (0 until the audience is recorded).
package struct MessageState: Equatable {
    static let size = 16
    var sendSeq: UInt64
    package var audienceSeq: UInt64

    init(sendSeq: UInt64, audienceSeq: UInt64) {
        self.sendSeq = sendSeq
        self.audienceSeq = audienceSeq
    }

    package init(_ bytes: UnsafeRawBufferPointer) {
        sendSeq = bytes.loadBigEndianUInt64(at: 0)
        audienceSeq = bytes.loadBigEndianUInt64(at: 8)
    }

    var encoded: PackedBytes {
        var bytes = PackedBytes()
        bytes.append(sendSeq)
        bytes.append(audienceSeq)
        return bytes
    }
}
