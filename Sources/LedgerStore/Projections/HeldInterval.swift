/// A span of seqs during which something held: after applying event `start`, and no longer after applying
/// event `end` (`nil`: still holds).
public struct HeldInterval: Sendable, Equatable {
    public var start: UInt64
    public var end: UInt64?

    public init(start: UInt64, end: UInt64?) {
        self.start = start
        self.end = end
    }

    public func contains(_ seq: UInt64) -> Bool { start <= seq && seq < (end ?? .max) }
}
