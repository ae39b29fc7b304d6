/// A failure of a call to etcd, or an answer that cannot be used.
public struct EtcdError: Error, Sendable, CustomStringConvertible {
    public let message: String

    public init(_ message: String) { self.message = message }

    /// No member answered: the last member's error.
    static func unavailable(_ error: (any Error)?) -> EtcdError {
        EtcdError("no etcd member answered: \(error.map { "\($0)" } ?? "no member")")
    }

    public var description: String { message }
}
