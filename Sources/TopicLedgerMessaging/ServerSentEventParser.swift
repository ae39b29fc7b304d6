import Foundation

/// One Server-Sent Event (the WHATWG event-stream format).
struct ServerSentEvent: Equatable, Sendable {
    var id: String?
    var event = "message"
    var data = ""
}

/// Splits an event stream's bytes into events, as the WHATWG parser does: lines end in LF, CR or CRLF; a
/// blank line dispatches the event; `:` starts a comment; `data` lines are joined with LF. Bytes after the last
/// blank line wait for more — an event cut by a dropped connection is never dispatched.
struct ServerSentEventParser {
    private var buffer: [UInt8] = []
    private var current = ServerSentEvent()
    private var hasData = false
    private var lastByteWasCR = false
    /// The largest event this parser holds (1 MiB more than a message's 4 KiB payload limit would ever need).
    static let maximumLineBytes = 1 << 20

    /// The events `bytes` completes. Throws when a single line grows past ``maximumLineBytes``.
    mutating func feed(_ bytes: some Sequence<UInt8>) throws(MessagingError) -> [ServerSentEvent] {
        var events: [ServerSentEvent] = []
        for byte in bytes {
            if lastByteWasCR {
                lastByteWasCR = false
                if byte == UInt8(ascii: "\n") { continue }
            }
            switch byte {
            case UInt8(ascii: "\n"), UInt8(ascii: "\r"):
                lastByteWasCR = byte == UInt8(ascii: "\r")
                if let event = line(buffer) { events.append(event) }
                buffer.removeAll(keepingCapacity: true)
            default:
                guard buffer.count < Self.maximumLineBytes else {
                    throw .unexpectedResponse(status: 200, "an event stream line longer than 1 MiB")
                }
                buffer.append(byte)
            }
        }
        return events
    }

    private mutating func line(_ line: [UInt8]) -> ServerSentEvent? {
        if line.isEmpty {
            defer {
                current.data = ""
                current.event = "message"
                hasData = false
            }
            // The id persists across events (the "last event ID buffer"); an event without data is not dispatched.
            return hasData ? current : nil
        }
        if line.first == UInt8(ascii: ":") { return nil }
        let colon = line.firstIndex(of: UInt8(ascii: ":"))
        let field = String(decoding: line[..<(colon ?? line.endIndex)], as: UTF8.self)
        var value = colon.map { line[line.index(after: $0)...] } ?? []
        if value.first == UInt8(ascii: " ") { value = value.dropFirst() }
        let text = String(decoding: value, as: UTF8.self)
        switch field {
        case "data":
            current.data += hasData ? "\n" + text : text
            hasData = true
        case "event": current.event = text
        case "id" where !text.contains("\0"): current.id = text
        default: break
        }
        return nil
    }
}
