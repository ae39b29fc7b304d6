/// How one replica keeps up with its project's log in etcd: what it has applied, where the log ends, when
/// it last moved, and why it failed last — from which its ``State`` follows (docs/cluster.md, "Replica states").
///
/// A value the replica updates as its loop goes; it reads no clock of its own (each update and each question
/// takes `now`), so that the 30-second rule is checked by tests without waiting.
struct ReplicaProgress: Sendable, Equatable {
    /// What `/v1/cluster` says of a replica.
    enum State: Sendable, Equatable, CustomStringConvertible {
        /// At the cluster's tail.
        case current
        /// Behind it, and applying.
        case catchingUp
        /// Behind it, and not applying: damaged, unable to write, or no progress for ``stallAfter``.
        case stalled(reason: String)

        var description: String {
            switch self {
            case .current: "current"
            case .catchingUp: "catching up"
            case .stalled(let reason): "stalled: \(reason)"
            }
        }

        var isStalled: Bool { if case .stalled = self { true } else { false } }
    }

    /// How long a replica may be behind without applying anything before it is stalled.
    static let stallAfter: Duration = .seconds(30)

    private(set) var appliedSeq: UInt64 = 0
    /// The cluster's tail as last read (0 before the first read).
    private(set) var tailSeq: UInt64 = 0
    /// When the replica last applied a commit or stood at the tail.
    private(set) var movedAt: ContinuousClock.Instant
    /// The last failure of the replica's loop since it last moved, or `nil`.
    private(set) var lastFailure: String?

    init(at now: ContinuousClock.Instant) { movedAt = now }

    /// The replica's head is `seq`.
    mutating func applied(_ seq: UInt64, at now: ContinuousClock.Instant) {
        if seq > appliedSeq || seq >= tailSeq {
            movedAt = now
            lastFailure = nil
        }
        appliedSeq = seq
        tailSeq = max(tailSeq, seq)
    }

    /// The cluster's log ends at `seq`.
    mutating func tail(_ seq: UInt64) { tailSeq = max(tailSeq, seq) }

    /// The cluster's log ends at `seq`, as read at `now`. A replica that stood at the tail until then moved until
    /// then: the ``stallAfter`` of a replica the tail leaves behind count from that moment, however long it had
    /// stood there unobserved.
    mutating func tail(_ seq: UInt64, at now: ContinuousClock.Instant) {
        if appliedSeq >= tailSeq, now > movedAt {
            movedAt = now
            lastFailure = nil
        }
        tail(seq)
    }

    /// The replica's loop failed with `reason`.
    mutating func failed(_ reason: String) { lastFailure = reason }

    /// The moment after which a replica behind the tail that moves no more is stalled (while it is catching up,
    /// nothing else changes its state but an update): what a watcher of the state waits for, instead of polling.
    var stallsAt: ContinuousClock.Instant { movedAt + Self.stallAfter }

    /// Events in the cluster's log that this replica has not applied.
    var lagEvents: UInt64 { tailSeq > appliedSeq ? tailSeq - appliedSeq : 0 }

    /// The state at `now`, given the replica's damage (a fork, a log trimmed past it) or storage failure.
    func state(at now: ContinuousClock.Instant, damage: String?, storageFailure: String?) -> State {
        if let damage { return .stalled(reason: damage) }
        if let storageFailure { return .stalled(reason: storageFailure) }
        guard lagEvents > 0 else { return .current }
        guard now - movedAt > Self.stallAfter else { return .catchingUp }
        return .stalled(
            reason: "nothing applied for \(Self.stallAfter.components.seconds) s, \(lagEvents) events behind"
                + (lastFailure.map { ": \($0)" } ?? ""))
    }
}
