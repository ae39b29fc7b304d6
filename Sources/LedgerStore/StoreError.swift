/// An error from the store: the ledger cannot be opened, written or trusted as asked.
public struct StoreError: Error, CustomStringConvertible, Sendable {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// Every code, for callers that must map each one (the server's error mapping switches over it, so a
        /// new code cannot fall into another's answer).
        public enum Kind: String, Sendable, CaseIterable {
            case unavailable, locked, notFound, invalidArgument, corrupt, rebuildRequired, incompatible
        }
        private typealias Base = Kind
        private let base: Base
        private init(_ base: Base) { self.base = base }
        public var kind: Kind { base }

        /// Storage failed (disk full, I/O error); nothing was written. HTTP 503.
        public static let unavailable = Code(.unavailable)
        /// Another process holds the ledger's writer lock.
        public static let locked = Code(.locked)
        /// No ledger, message or record by that name.
        public static let notFound = Code(.notFound)
        /// The request breaks a rule of the store (time going backwards, a bad seq).
        public static let invalidArgument = Code(.invalidArgument)
        /// Stored data does not decode or does not match its hash.
        public static let corrupt = Code(.corrupt)
        /// Projections are incomplete (an interrupted rebuild); run `ledger rebuild`.
        public static let rebuildRequired = Code(.rebuildRequired)
        /// The ledger was written by a store layout this build cannot read.
        public static let incompatible = Code(.incompatible)

        public var description: String { base.rawValue }
    }

    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}

/// Lets `catch StoreError.Code.locked` match a `StoreError` with that code.
public func ~= (pattern: StoreError.Code, error: any Error) -> Bool {
    (error as? StoreError)?.code == pattern
}
