/// What an instance's ActivityKit token is held for: following one topic's Live Activity (the activity's push
/// token), or starting activities of one attributes type (a push-to-start token).
///
/// An instance holds at most one token per scope; a new one replaces it (``LedgerProjection``).
public enum LiveActivityScope: Sendable, Hashable {
    /// The instance follows the topic's Live Activity: the topic's `liveactivity` updates and ends reach this token.
    case topic(TopicID)
    /// The instance's push-to-start token for the ActivityAttributes type so named: the topics' `liveactivity`
    /// starts of that type reach it.
    case pushToStart(attributesType: String)

    /// The longest attributes type name, in UTF-8 bytes (a Swift type's name; ``isValidAttributesType(_:)``).
    public static let maximumAttributesTypeBytes = 200

    /// Whether `name` can be an ActivityAttributes type's name as ActivityKit's `attributes-type` gives it: 1 to
    /// ``maximumAttributesTypeBytes`` bytes of ASCII letters, digits, `_` and `.` (a Swift type, or a module-qualified
    /// one), not starting with a digit or `.`.
    public static func isValidAttributesType(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard let first = bytes.first, bytes.count <= maximumAttributesTypeBytes,
            !(48...57).contains(first), first != UInt8(ascii: ".")
        else { return false }
        return bytes.allSatisfy { byte in
            (48...57).contains(byte) || (65...90).contains(byte) || (97...122).contains(byte)
                || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ".")
        }
    }
}
