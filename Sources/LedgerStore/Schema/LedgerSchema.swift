import LMDBKit
import LedgerCore

/// The named LMDB databases of one project's ledger and the layout of their keys and values.
///
/// Integers are big-endian so keys sort numerically. Interval ends of `UInt64.max` never occur: open
/// intervals live in the current-state databases, closed ones in the history databases.
///
/// | database | key | value |
/// |---|---|---|
/// | meta | name (UTF-8) | see `MetaKey` |
/// | log | seq u64 | hash(32) ‖ encoded event |
/// | tokens | ``NameKey`` of the token | instance u32 |
/// | instances | instance u32 | `InstanceRecord` (token, platform, app id) |
/// | universe (dup) | 0 u32 | instance u32 ‖ since u64 (registered now) |
/// | universeHistory (dup) | 0 u32 | instance u32 ‖ start u64 ‖ end u64 (closed registrations) |
/// | topicIDs | ``NameKey`` of the topic name | topic u32 |
/// | topicNames | topic u32 | topic name |
/// | instanceTopics (dup) | instance u32 | topic u32 ‖ since u64 |
/// | recentMemberships (dup) | partition u32 (instance >> 11) | since u64 ‖ instance u32 ‖ topic u32 (memberships not yet moved to `instanceTopics`) |
/// | topicMembers (dup) | topic u32 | instance u32 ‖ since u64 |
/// | instanceTopicHistory (dup) | instance u32 | topic u32 ‖ start u64 ‖ end u64 |
/// | topicMemberHistory (dup) | topic u32 | instance u32 ‖ start u64 ‖ end u64 |
/// | messages | message id u64 | ``MessageState``: send seq u64 ‖ audience seq u64 (0 until recorded) |
/// | sends | send seq u64 | message id u64 (the sends in log order: a device's inbox reads from its cursor) |
/// | acknowledged | instance u32 | seq u64: the delivery cursor (every message sent at or before it is acked) |
/// | merkle | end seq u64 ‖ level u8 | SHA-256 (32): a complete subtree of the RFC 6962 tree (``MerkleStore``) |
/// | apnsTokens | instance u32 | since u64 ‖ sandbox u8 ‖ APNs device token (the token held now; ``APNsTokenRecord``) |
/// | apnsTokenHistory | instance u32 ‖ start u64 | end u64 ‖ sandbox u8 ‖ APNs device token (tokens no longer held) |
/// | pushProgress | send seq u64 ‖ event seq u64 | through instance u32 ‖ flags u8 (each `pushProgress` event; ``PushRecords``) |
/// | pushFailures | send seq u64 ‖ instance u32 | kind u8 ‖ status u16 ‖ event seq u64 ‖ reason (pushes refused for good) |
/// | liveActivityChannels | ``NameKey`` of the topic name | created seq u64 ‖ policy u8 ‖ id length u16 ‖ channel id ‖ topic name (``LiveActivityChannelRecord``) |
/// | liveActivityTokens | kind u8 ‖ … (``LiveActivityTokenRecord``) | since or end u64 ‖ ActivityKit token (followed topics' activity tokens, push-to-start tokens) |
///
/// An instance's current topics are the union of its `instanceTopics` and its entries in `recentMemberships`,
/// which never hold the same membership: the writer appends new memberships to their partition's run of
/// `recentMemberships` and moves whole partitions into `instanceTopics` once enough have gathered
/// (``RecentMemberships``), so that a batch touching thousands of instances writes the last pages of a few
/// runs instead of one page per instance.
///
/// An interval `[start, end)` means: held after applying event `start`, no longer after applying `end`.
/// Duplicate databases hold fixed-size values so that whole member sets are read a page at a time.
package struct LedgerSchema: Sendable {
    /// Version of this layout, stored in meta; bumped when a change needs a migration or a rebuild.
    /// Layout 2 added `sends` and `acknowledged`; layout 3 stores names over LMDB's key limit under their
    /// hash (``NameKey``); layout 4 keeps the Merkle tree over the log (`merkle`); layout 5 keys its subtrees
    /// by the seq that completes them, so that appends write one page; layout 6 stores subtrees from 256
    /// leaves instead of 16, so that most commits write no page of it; layout 7 adds `recentInstanceTopics`, keyed
    /// by instance; layout 8 replaces it with `recentMemberships`, keyed by partition and in seq order; layout 9
    /// adds `apnsTokens`, `apnsTokenHistory`, `pushProgress` and `pushFailures` (and the events that fill them,
    /// which older builds cannot read); layout 10 changes no database but its log may hold what layout 9's builds
    /// misread: rewritten records of erased devices (encoding version 2) and audiences whose recipient digest is
    /// over device numbers (``RecipientDigest/Version/devices``); layout 11 changes no database but writes sealed events
    /// (encoding version 3), which layout 10's builds cannot read; layout 12 adds `liveActivityChannels` (and the
    /// events that fill it, which layout 11's builds cannot read); layout 13 adds `liveActivityTokens` (and the
    /// events that fill it) and records a send's broadcast channel in its `sent` event, which layout 12's builds would
    /// read as a send to each follower. A writer opening an older ledger upgrades it in place (see ``LedgerStorage``).
    static let layoutVersion: UInt32 = 13

    package let meta: LMDBDatabase
    package let log: LMDBDatabase
    let tokens: LMDBDatabase
    let instances: LMDBDatabase
    let universe: LMDBDatabase
    let universeHistory: LMDBDatabase
    let topicIDs: LMDBDatabase
    let topicNames: LMDBDatabase
    package let instanceTopics: LMDBDatabase
    package let recentMemberships: LMDBDatabase
    let topicMembers: LMDBDatabase
    let instanceTopicHistory: LMDBDatabase
    let topicMemberHistory: LMDBDatabase
    package let messages: LMDBDatabase
    package let sends: LMDBDatabase
    let acknowledged: LMDBDatabase
    let merkle: LMDBDatabase
    let apnsTokens: LMDBDatabase
    let apnsTokenHistory: LMDBDatabase
    let pushProgress: LMDBDatabase
    let pushFailures: LMDBDatabase
    let liveActivityChannels: LMDBDatabase
    let liveActivityTokens: LMDBDatabase

    /// Every database derived from the log, in a fixed order (what `rebuild` clears and `verify` compares).
    package var projections: [LMDBDatabase] {
        [
            tokens, instances, universe, universeHistory, topicIDs, topicNames, instanceTopics, recentMemberships,
            topicMembers, instanceTopicHistory, topicMemberHistory, messages, sends, acknowledged, merkle,
            apnsTokens, apnsTokenHistory, pushProgress, pushFailures, liveActivityChannels, liveActivityTokens,
        ]
    }

    /// Opens the databases, creating them in a write transaction (or only opening them in a read one).
    package init(_ txn: LMDBTransaction) throws {
        let create: LMDBDatabase.Flags = txn.isReadOnly ? [] : [.create]
        let duplicates: LMDBDatabase.Flags = create.union([.duplicateSort, .duplicateFixed])
        meta = try txn.openDatabase("meta", flags: create)
        log = try txn.openDatabase("log", flags: create)
        tokens = try txn.openDatabase("tokens", flags: create)
        instances = try txn.openDatabase("instances", flags: create)
        universe = try txn.openDatabase("universe", flags: duplicates)
        universeHistory = try txn.openDatabase("universeHistory", flags: duplicates)
        topicIDs = try txn.openDatabase("topicIDs", flags: create)
        topicNames = try txn.openDatabase("topicNames", flags: create)
        instanceTopics = try txn.openDatabase("instanceTopics", flags: duplicates)
        recentMemberships = try txn.openDatabase("recentMemberships", flags: duplicates)
        topicMembers = try txn.openDatabase("topicMembers", flags: duplicates)
        instanceTopicHistory = try txn.openDatabase("instanceTopicHistory", flags: duplicates)
        topicMemberHistory = try txn.openDatabase("topicMemberHistory", flags: duplicates)
        messages = try txn.openDatabase("messages", flags: create)
        sends = try txn.openDatabase("sends", flags: create)
        acknowledged = try txn.openDatabase("acknowledged", flags: create)
        merkle = try txn.openDatabase("merkle", flags: create)
        apnsTokens = try txn.openDatabase("apnsTokens", flags: create)
        apnsTokenHistory = try txn.openDatabase("apnsTokenHistory", flags: create)
        pushProgress = try txn.openDatabase("pushProgress", flags: create)
        pushFailures = try txn.openDatabase("pushFailures", flags: create)
        liveActivityChannels = try txn.openDatabase("liveActivityChannels", flags: create)
        liveActivityTokens = try txn.openDatabase("liveActivityTokens", flags: create)
    }
}

/// Keys of the meta database.
package enum MetaKey {
    /// u32: `LedgerSchema.layoutVersion` the ledger was created with.
    static let layoutVersion = "layoutVersion"
    /// UTF-8: the project the ledger belongs to.
    static let project = "project"
    /// seq u64 ‖ time i64 ‖ hash(32): the last appended event.
    package static let head = "head"
    /// seq u64: projections reflect the log through this seq; absent = through the head. Set while a
    /// rebuild runs, so that an interrupted rebuild is detected.
    package static let rebuildingThrough = "rebuildingThrough"
    /// seq u64, on a cluster's node: the seq through which the cluster held the log when the last batch
    /// committed ahead of it (``ReplicationGate/commitsAhead``) — so everything after it may be an
    /// unacknowledged suffix, to roll back to what etcd holds. Removed when a ledger opens on its own (no
    /// cluster), so that a write it acknowledges is never taken for one.
    package static let clusterHeld = "clusterHeld"
    /// seq u64: the last seq a retention sweep looked at (``ContentRetention``); the next sweep starts after it.
    package static let retentionThrough = "retentionThrough"
}

/// The last appended event: what the next append chains onto.
public struct LedgerHead: Sendable, Equatable {
    public var seq: UInt64
    public var time: LedgerTime
    public var hash: [UInt8]

    package static let empty = LedgerHead(seq: 0, time: LedgerTime(microseconds: 0), hash: HashChain.genesis)

    package var encoded: [UInt8] {
        var bytes = ByteWriter(capacity: 48)
        bytes.append(seq)
        bytes.append(UInt64(bitPattern: time.microseconds))
        bytes.append(hash)
        return bytes.bytes
    }

    init(seq: UInt64, time: LedgerTime, hash: [UInt8]) {
        self.seq = seq
        self.time = time
        self.hash = hash
    }

    init(decoding bytes: UnsafeRawBufferPointer) throws {
        guard bytes.count == 48 else { throw StoreError(.corrupt, "meta head has \(bytes.count) bytes, expected 48") }
        seq = bytes.loadBigEndianUInt64(at: 0)
        time = LedgerTime(microseconds: Int64(bitPattern: bytes.loadBigEndianUInt64(at: 8)))
        hash = Array(bytes[16..<48])
    }
}

/// Builds big-endian keys and values.
struct ByteWriter {
    var bytes: [UInt8]
    init(capacity: Int) { bytes = []; bytes.reserveCapacity(capacity) }
    mutating func append(_ value: UInt64) { withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) } }
    mutating func append(_ value: UInt32) { withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) } }
    mutating func append(_ value: UInt16) { withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) } }
    mutating func append(_ value: [UInt8]) { bytes.append(contentsOf: value) }
    mutating func append(_ value: String) { bytes.append(contentsOf: value.utf8) }
}

/// The single key of the `universe` and `universeHistory` databases.
let universeKey = UInt32(0)

/// `id ‖ seq` — a current-state entry (`instanceTopics`, `topicMembers`, `universe`).
@inline(__always)
package func membershipValue(_ id: UInt32, since: UInt64) -> PackedBytes {
    var bytes = PackedBytes()
    bytes.append(id)
    bytes.append(since)
    return bytes
}

/// `id ‖ start ‖ end` — a closed interval (`instanceTopicHistory`, `topicMemberHistory`, `universeHistory`).
@inline(__always)
func intervalValue(_ id: UInt32, start: UInt64, end: UInt64) -> PackedBytes {
    var bytes = PackedBytes()
    bytes.append(id)
    bytes.append(start)
    bytes.append(end)
    return bytes
}
