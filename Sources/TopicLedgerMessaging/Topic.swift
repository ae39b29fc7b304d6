import Foundation
/// A topic name as the iOS SDK checks it before it calls the server: a leading `/topics/` is dropped, and what
/// remains must match `[a-zA-Z0-9-_.~%]{1,900}`.
enum Topic {
    static let maximumLength = 900

    static func validated(_ name: String) throws(MessagingError) -> String {
        let bare = name.hasPrefix("/topics/") ? String(name.dropFirst("/topics/".count)) : name
        guard !bare.isEmpty, bare.utf8.count <= maximumLength, bare.utf8.allSatisfy(isAllowed) else {
            throw .invalidTopicName(name)
        }
        return bare
    }

    private static func isAllowed(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."),
            UInt8(ascii: "~"), UInt8(ascii: "%"):
            true
        default: false
        }
    }

    /// The name as one URL path segment or query value: `%` is the only allowed byte that needs escaping.
    static func percentEncoded(_ topic: String) -> String {
        topic.replacingOccurrences(of: "%", with: "%25")
    }
}
