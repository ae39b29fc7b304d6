import Crypto
import Foundation

/// The `apns-id` of the push of one message to one device: a UUID derived from the message id and the
/// registration token, so that every retry of the push carries the same one (APNs and an audit recognise it),
/// and an audit can name it without storing it.
///
/// The first 16 bytes of SHA-256(`"<message id>\n<registration token>"`), marked as an RFC 9562 version 8 UUID
/// (custom), in lowercase.
public enum APNsPushID {
    public static func uuid(messageID: UInt64, token: RegistrationToken) -> UUID {
        uuid(of: "\(messageID)\n\(token.rawValue)")
    }

    private static func uuid(of text: String) -> UUID {
        var bytes = Array(SHA256.hash(data: Array(text.utf8)).prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x80  // version 8
        bytes[8] = (bytes[8] & 0x3F) | 0x80  // variant 10
        return UUID(
            uuid: (
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9],
                bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
            ))
    }

    /// The `apns-request-id` of the one broadcast of the Live Activity send at `seq` in `project`'s log (message
    /// `messageID`), the same on every attempt: the first 16 bytes of
    /// SHA-256(`"broadcast\n<project>\n<seq>\n<message id>"`), a version 8 UUID.
    ///
    /// Scoped by the project and the send's seq as well as the message id: a message id is drawn from the clock
    /// (microseconds × 1000) and unique only within its project, so two projects — or two servers — sending in the
    /// same microsecond have equal message ids, and an id of the message alone named both broadcasts the same to
    /// Apple. A project id never holds `\n` (``ProjectID``), so the text is read back one way only; a push's text
    /// begins with a digit, so a broadcast's id is never a push's.
    ///
    /// ```swift
    /// let requestID = APNsPushID.broadcastUUID(project: project, seq: 42, messageID: messageID)
    /// ```
    public static func broadcastUUID(project: ProjectID, seq: UInt64, messageID: UInt64) -> UUID {
        uuid(of: "broadcast\n\(project.rawValue)\n\(seq)\n\(messageID)")
    }

    public static func string(messageID: UInt64, token: RegistrationToken) -> String {
        uuid(messageID: messageID, token: token).uuidString.lowercased()
    }
}
