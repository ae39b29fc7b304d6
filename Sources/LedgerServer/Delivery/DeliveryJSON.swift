import LedgerCore
import LedgerStore
import FCMWire
import LedgerQueries
import NIOCore
import Synchronization

/// The JSON of delivered messages, assembled from bytes.
///
/// The part that carries user data — the app's payload — is rendered once per send by the store
/// (``InboxMessage/payloadJSON``, Foundation's serializer); what differs per device (its cursor and expiry) and
/// the envelope around it are spliced here. Every spliced value is a decimal number, an RFC 3339 time or a
/// project id (`[A-Za-z0-9._-]`), none of which needs escaping — but for the collapse key and push type,
/// which are escaped. Replaying a device's backlog so costs a
/// copy per message instead of a JSON parse and serialization (which took three quarters of the server's CPU
/// under SSE reconnect churn; docs/performance.md, Soak).
///
/// Keys are in sorted order, as everywhere else the server answers JSON.
enum DeliveryJSON {
    /// `{"collapseKey":…,"cursor":…,"expireTime":…,"messageId":…,"name":…,"payload":{…},"priority":…,
    /// "pushType":…,"sentTime":…}` (`collapseKey` and `pushType` only when the message has them).
    static func message(_ message: InboxMessage, project: ProjectID) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(message.payloadJSON.count + 192 + project.rawValue.utf8.count)
        append(message, project: project, to: &out)
        return out
    }

    /// One Server-Sent Event: `id:` the cursor, `event: message`, `data:` the message.
    static func event(_ message: InboxMessage, project: ProjectID, to out: inout [UInt8]) {
        out += "id: ".utf8
        out += String(message.cursor).utf8
        out += "\nevent: message\ndata: ".utf8
        append(message, project: project, to: &out)
        out += "\n\n".utf8
    }

    /// A long poll's answer: `{"cursor":"N","messages":[…]}`.
    static func page(_ page: InboxPage, project: ProjectID) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(page.messages.reduce(64) { $0 + $1.payloadJSON.count + 256 })
        out += #"{"cursor":""#.utf8
        out += String(page.through).utf8
        out += #"","messages":["#.utf8
        for (index, message) in page.messages.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            append(message, project: project, to: &out)
        }
        out += "]}".utf8
        return out
    }

    private static func append(_ message: InboxMessage, project: ProjectID, to out: inout [UInt8]) {
        out += "{".utf8
        if let collapseKey = message.collapseKey {
            // User input: escaped by the JSON encoder.
            out += #""collapseKey":"#.utf8
            out += JSONValue.string(collapseKey).json
            out += ",".utf8
        }
        out += #""cursor":""#.utf8
        out += String(message.cursor).utf8
        out += #"","expireTime":""#.utf8
        out += message.expires.description.utf8
        out += #"","messageId":""#.utf8
        out += String(message.messageID).utf8
        out += #"","name":"projects/"#.utf8
        out += project.rawValue.utf8
        out += "/messages/".utf8
        out += String(message.messageID).utf8
        out += #"","payload":"#.utf8
        out += message.payloadJSON
        out += #","priority":""#.utf8
        out += message.priority.rawValue.utf8
        if let pushType = message.pushType {
            // One of the APNs push types validation allows (letters only), or what a stored message says:
            // escaped all the same.
            out += #"","pushType":"#.utf8
            out += JSONValue.string(pushType).json
            out += #","sentTime":""#.utf8
        } else {
            out += #"","sentTime":""#.utf8
        }
        out += message.sentTime.description.utf8
        out += #""}"#.utf8
    }
}

/// Each recent send's Server-Sent Event, rendered once for each platform and expiry it is delivered with: the
/// bytes are the same for every device that gets it, so a send to a thousand streaming devices is rendered once
/// and its buffer written a thousand times (rendering it per device was a tenth of the server's time per send).
///
/// - Note: Thread-safe.
final class RenderedEvents: Sendable {
    private struct Key: Hashable {
        let cursor: UInt64
        let platform: DevicePlatform
        let expires: Int64
    }

    /// Past this many entries the cache starts again (a page of backlog renders at most ``DeliveryRoutes/pageSize``).
    static let capacity = 4096
    private let entries = Mutex<[Key: ByteBuffer]>([:])
    private let project: ProjectID

    init(project: ProjectID) {
        self.project = project
    }

    /// `message` as one Server-Sent Event (``DeliveryJSON/event(_:project:to:)``).
    func event(_ message: InboxMessage) -> ByteBuffer {
        let key = Key(cursor: message.cursor, platform: message.platform, expires: message.expires.microseconds)
        if let rendered = entries.withLock({ $0[key] }) { return rendered }
        var bytes: [UInt8] = []
        DeliveryJSON.event(message, project: project, to: &bytes)
        let rendered = ByteBuffer(bytes: bytes)
        entries.withLock { entries in
            if entries.count >= Self.capacity { entries.removeAll(keepingCapacity: true) }
            entries[key] = rendered
        }
        return rendered
    }

    func removeAll() {
        entries.withLock { $0.removeAll() }
    }
}
