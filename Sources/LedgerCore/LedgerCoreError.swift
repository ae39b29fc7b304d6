/// An error from the pure domain: bad input, or bytes that are not a valid event.
public struct LedgerCoreError: Error, CustomStringConvertible, Sendable, Equatable {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String { case invalidArgument, corruptEvent, unsupportedVersion }
        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// Input that breaks a rule (a bad topic name, a malformed token, a bad condition).
        public static let invalidArgument = Code(.invalidArgument)
        /// Stored bytes that do not decode as an event.
        public static let corruptEvent = Code(.corruptEvent)
        /// An event written by an encoding version this build does not read.
        public static let unsupportedVersion = Code(.unsupportedVersion)

        public var description: String { base.rawValue }
    }

    public let code: Code
    /// The input field at fault (`message.topic`, `registration_tokens[3]`), when there is one.
    public let field: String?
    public let message: String

    public init(_ code: Code, field: String? = nil, _ message: String) {
        self.code = code
        self.field = field
        self.message = message
    }

    public var description: String { field.map { "\($0): \(message)" } ?? message }
}
