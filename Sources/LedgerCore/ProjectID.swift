/// A project id: 1…100 characters from `[A-Za-z0-9._-]`, not starting with a dot. It names the
/// project's directory under the data directory, so nothing that could escape it is allowed.
public struct ProjectID: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String

    public static let `default` = try! ProjectID("demo-project")

    /// - Throws: `.invalidArgument` naming `field` when the id is malformed.
    public init(_ rawValue: String, field: String = "project") throws(LedgerCoreError) {
        let utf8 = rawValue.utf8
        guard (1...100).contains(utf8.count), utf8.first != UInt8(ascii: "."),
            utf8.allSatisfy({ byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                    UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"):
                    true
                default: false
                }
            })
        else {
            throw LedgerCoreError(
                .invalidArgument, field: field,
                "project id must be 1 to 100 characters from [A-Za-z0-9._-] and not start with '.'")
        }
        self.rawValue = rawValue
    }

    public var description: String { rawValue }
}
