/// A set of instance ids as a dense bitmap: bit `i` of word `i / 64` is instance `i`.
///
/// Instance ids are dense (assigned 1, 2, 3, … in log order), so a bitmap over a million instances is
/// 125 KiB and intersection, union, complement and count each touch 15,625 words. Measured against sorted
/// `[UInt32]` merges in `tools/bench` (docs/performance.md): the bitmap wins whenever operands hold more
/// than about 1/64 of the universe, and is never slow enough to matter when they hold less.
public struct InstanceSet: Equatable, Sendable {
    public private(set) var words: [UInt64]

    /// An empty set able to hold ids `0..<capacity`.
    public init(capacity: Int) {
        words = [UInt64](repeating: 0, count: (capacity + 63) / 64)
    }

    /// The ids `0..<capacity` this set can hold.
    public var capacity: Int { words.count * 64 }

    /// Lends the bitmap's words for bulk filling (bit `i % 64` of word `i / 64` is id `i`).
    public mutating func withUnsafeMutableWords<R>(_ body: (UnsafeMutableBufferPointer<UInt64>) throws -> R) rethrows
        -> R
    {
        try words.withUnsafeMutableBufferPointer { try body($0) }
    }

    @inline(__always)
    public mutating func insert(_ id: InstanceID) {
        words[Int(id >> 6)] |= 1 << UInt64(id & 63)
    }

    @inline(__always)
    public func contains(_ id: InstanceID) -> Bool {
        let index = Int(id >> 6)
        return index < words.count && words[index] & (1 << UInt64(id & 63)) != 0
    }

    /// Whether both sets hold exactly the same ids, whatever their capacities (`==` also compares those).
    public func hasSameMembers(as other: InstanceSet) -> Bool {
        let shared = min(words.count, other.words.count)
        return words[..<shared].elementsEqual(other.words[..<shared])
            && words[shared...].allSatisfy { $0 == 0 } && other.words[shared...].allSatisfy { $0 == 0 }
    }

    public var count: Int { words.reduce(0) { $0 + $1.nonzeroBitCount } }
    public var isEmpty: Bool { words.allSatisfy { $0 == 0 } }

    public mutating func formIntersection(_ other: InstanceSet) {
        precondition(other.words.count == words.count, "sets of different capacity")
        for index in words.indices { words[index] &= other.words[index] }
    }

    public mutating func formUnion(_ other: InstanceSet) {
        precondition(other.words.count == words.count, "sets of different capacity")
        for index in words.indices { words[index] |= other.words[index] }
    }

    public mutating func subtract(_ other: InstanceSet) {
        precondition(other.words.count == words.count, "sets of different capacity")
        for index in words.indices { words[index] &= ~other.words[index] }
    }

    /// Calls `body` with each id in ascending order.
    public func forEach(_ body: (InstanceID) throws -> Void) rethrows {
        for (index, word) in words.enumerated() where word != 0 {
            var remaining = word
            while remaining != 0 {
                let bit = remaining.trailingZeroBitCount
                try body(InstanceID(index * 64 + bit))
                remaining &= remaining - 1
            }
        }
    }

    /// Up to `limit` ids greater than `after` (from the first when `nil`), ascending: a page of a large set
    /// without visiting the words before it.
    public func ids(after: InstanceID?, limit: Int) -> [InstanceID] {
        var result: [InstanceID] = []
        guard limit > 0 else { return result }
        let first = after.map { Int($0) + 1 } ?? 0
        var index = first >> 6
        guard index < words.count else { return result }
        var word = words[index] & (~0 << UInt64(first & 63))
        while true {
            while word != 0 {
                result.append(InstanceID(index * 64 + word.trailingZeroBitCount))
                if result.count == limit { return result }
                word &= word - 1
            }
            index += 1
            guard index < words.count else { return result }
            word = words[index]
        }
    }

    /// The ids in ascending order.
    public var ids: [InstanceID] {
        var result: [InstanceID] = []
        result.reserveCapacity(count)
        forEach { result.append($0) }
        return result
    }
}

extension Condition {
    /// The instances that satisfy the condition, by set algebra: a topic is its member set, `&&` and `||`
    /// intersect and unite, `!` is the complement within `universe` (the registered instances).
    ///
    /// - Parameter members: the member set of a topic (sets of `universe.capacity`); called once per
    ///   distinct topic.
    public func audience(universe: InstanceSet, members: (TopicName) throws -> InstanceSet) rethrows
        -> InstanceSet
    {
        var cache: [TopicName: InstanceSet] = [:]
        return try evaluate(universe: universe) { name in
            if let cached = cache[name] { return cached }
            var set = try members(name)
            // Members are always registered; intersecting keeps the result inside the universe regardless.
            set.formIntersection(universe)
            cache[name] = set
            return set
        }
    }

    private func evaluate(universe: InstanceSet, members: (TopicName) throws -> InstanceSet) rethrows
        -> InstanceSet
    {
        switch self {
        case .topic(let name):
            return try members(name)
        case .not(let inner):
            var result = universe
            result.subtract(try inner.evaluate(universe: universe, members: members))
            return result
        case .and(let left, let right):
            var result = try left.evaluate(universe: universe, members: members)
            result.formIntersection(try right.evaluate(universe: universe, members: members))
            return result
        case .or(let left, let right):
            var result = try left.evaluate(universe: universe, members: members)
            result.formUnion(try right.evaluate(universe: universe, members: members))
            return result
        }
    }

    /// The condition's tree with the audience size of every sub-expression, for `ledger explain`.
    public func explained(universe: InstanceSet, members: (TopicName) throws -> InstanceSet) rethrows
        -> ExplainedCondition
    {
        let size = try audience(universe: universe, members: members).count
        switch self {
        case .topic(let name):
            return ExplainedCondition(label: "'\(name.rawValue)' in topics", audienceSize: size, children: [])
        case .not(let inner):
            return ExplainedCondition(
                label: "NOT", audienceSize: size, children: [try inner.explained(universe: universe, members: members)])
        case .and(let left, let right), .or(let left, let right):
            let label = if case .and = self { "AND" } else { "OR" }
            return ExplainedCondition(
                label: label, audienceSize: size,
                children: [
                    try left.explained(universe: universe, members: members),
                    try right.explained(universe: universe, members: members),
                ])
        }
    }
}

/// One node of an explained condition: what it is and how many registered instances satisfy it.
public struct ExplainedCondition: Sendable, Equatable {
    public var label: String
    public var audienceSize: Int
    public var children: [ExplainedCondition]

    /// An indented tree, one node per line: `AND  (12 instances)`.
    public func lines(indent: String = "") -> [String] {
        ["\(indent)\(label)  (\(audienceSize) instance\(audienceSize == 1 ? "" : "s"))"]
            + children.flatMap { $0.lines(indent: indent + "  ") }
    }
}
