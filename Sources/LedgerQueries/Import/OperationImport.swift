import LedgerStore
import Foundation
import LedgerCore
import FCMWire

/// Reads JSON lines of operations into write requests, for `ledger import` (demos, tests, benchmarks): one line
/// at a time with ``parse(line:number:)``, grouped into requests by ``RequestBuilder``.
///
/// One operation per line:
/// ```
/// {"op":"register","token":"t1","platform":"ios","appId":"com.example"}
/// {"op":"subscribe","token":"t1","topic":"news","via":"iid"}
/// {"op":"unsubscribe","token":"t1","topic":"news"}
/// {"op":"send","condition":"'news' in topics && !('sports' in topics)","precedence":"standard","message":{…}}
/// {"op":"unregister","token":"t1","reason":"uninstalled"}
/// {"op":"setApnsToken","token":"t1","apnsToken":"<hex>","apnsSandbox":false}
/// {"op":"clearApnsToken","token":"t1","reason":"…"}
/// ```
/// Optional on every line: `time` (RFC 3339 or microseconds; never earlier than the line before),
/// `actor` (default `import`), `requestId`. Consecutive lines with the same time, actor and request id
/// form one request, up to `maximumRequestOperations`.
public enum OperationImport {
    public static let maximumRequestOperations = 50_000

    /// One line of the file: an operation and the request it belongs to.
    public struct Line: Sendable {
        public var operation: LedgerOperation
        public var actor: String
        public var requestID: String?
        public var time: LedgerTime?
    }

    /// Groups consecutive lines with the same time, actor and request id into one request, up to
    /// ``maximumRequestOperations``.
    public struct RequestBuilder {
        private var open: WriteRequest?

        public init() {}

        /// Adds line `number`; returns the request it closed, if it starts a new one.
        public mutating func add(_ line: Line, number: Int) -> WriteRequest? {
            if var last = open, last.actor == line.actor, last.time == line.time,
                last.requestID == (line.requestID ?? last.requestID),
                line.requestID != nil || last.requestID.hasPrefix("import-line-"),
                last.operations.count < maximumRequestOperations
            {
                // Taken out and put back, so that appending does not copy the operation list.
                open = nil
                last.operations.append(line.operation)
                open = last
                return nil
            }
            let closed = open
            open = WriteRequest(
                actor: line.actor, requestID: line.requestID ?? "import-line-\(number)", time: line.time,
                operations: [line.operation])
            return closed
        }

        /// The last request, once the file has ended.
        public mutating func finish() -> WriteRequest? {
            defer { open = nil }
            return open
        }
    }

    /// Parses one line (without its newline); `nil` for a blank line or a `#` comment.
    ///
    /// - Throws: `LedgerCoreError.invalidArgument` naming the line and what is wrong with it.
    public static func parse(line bytes: UnsafeBufferPointer<UInt8>, number: Int) throws -> Line? {
        func fail(_ message: String) -> LedgerCoreError {
            LedgerCoreError(.invalidArgument, field: "line \(number)", message)
        }
        let isSpace = { (byte: UInt8) in byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") || byte == 13 }
        guard let first = bytes.firstIndex(where: { !isSpace($0) }) else { return nil }
        if bytes[first] == UInt8(ascii: "#") { return nil }
        var values = LineValues()
        do {
            try FlatJSONObject.forEachMember(in: UnsafeBufferPointer(rebasing: bytes[first...])) { name, value in
                values.set(name, value)
            }
        } catch {
            throw fail("not a JSON object: \(error)")
        }
        func string(_ value: FlatJSONObject.Value?, _ key: String) throws -> String? {
            switch value {
            case nil: return nil
            case .string(let text): return text
            default: throw fail("\(key) must be a string")
            }
        }
        let fields = try LineFields(
            op: string(values.op, "op"), token: string(values.token, "token"), topic: string(values.topic, "topic"),
            via: string(values.via, "via"), platform: string(values.platform, "platform"),
            appId: string(values.appId, "appId"), reason: string(values.reason, "reason"),
            condition: string(values.condition, "condition"), precedence: string(values.precedence, "precedence"),
            actor: string(values.actor, "actor"), requestId: string(values.requestId, "requestId"),
            apnsToken: string(values.apnsToken, "apnsToken"))
        func required(_ value: String?, _ key: String) throws -> String {
            guard let value else { throw fail("\(key) is required") }
            return value
        }
        func wrap<T>(_ body: () throws -> T) throws -> T { try rethrow(fail, body) }
        let token = { () throws -> RegistrationToken in
            let text = try required(fields.token, "token")
            return try wrap { try RegistrationToken(text) }
        }
        let topic = { () throws -> TopicName in
            let text = try required(fields.topic, "topic")
            return try wrap { try TopicName(text) }
        }
        let via = { () throws -> SubscriptionChannel in
            guard let via = SubscriptionChannel(rawValue: fields.via ?? "v1") else {
                throw fail("via must be client, v1 or iid")
            }
            return via
        }
        let operation: LedgerOperation
        switch try required(fields.op, "op") {
        case "register":
            // The limits of the device API (`POST …/registrations`).
            for (key, value) in [("platform", fields.platform), ("appId", fields.appId)]
            where value?.utf8.count ?? 0 > 256 {
                throw fail("\(key) must be at most 256 bytes")
            }
            operation = .register(try token(), platform: fields.platform, appID: fields.appId)
        case "unregister":
            operation = .unregister(try token(), reason: fields.reason ?? "imported")
        case "subscribe":
            operation = .subscribe(try token(), try topic(), via: try via())
        case "unsubscribe":
            operation = .unsubscribe(try token(), try topic(), via: try via())
        case "send":
            operation = try sendOperation(fields, line: Data(buffer: bytes), fail: fail)
        case "setApnsToken":
            // `apnsSandbox` is a JSON bool, which the flat reader does not keep: such lines are read once more.
            let object = (try? JSONValue(parsing: UnsafeRawBufferPointer(bytes)))?.object
            var sandbox = false
            if let value = object?["apnsSandbox"] {
                guard case .bool(let flag) = value else { throw fail("apnsSandbox must be true or false") }
                sandbox = flag
            }
            let hex = try required(fields.apnsToken, "apnsToken")
            operation = .setAPNsToken(try token(), try wrap { try APNsDeviceToken(hex: hex, sandbox: sandbox) })
        case "clearApnsToken":
            operation = .clearAPNsToken(try token(), reason: fields.reason ?? "imported")
        case let other:
            throw fail(
                "unknown op \(other); expected register, unregister, subscribe, unsubscribe, send, setApnsToken"
                    + " or clearApnsToken")
        }
        var time: LedgerTime?
        switch values.time {
        case nil: break
        case .integer(let micros): time = LedgerTime(microseconds: micros)
        case .string(let text) where LedgerTime(parsing: text) != nil: time = LedgerTime(parsing: text)
        default: throw fail("time must be RFC 3339 (2026-03-01T12:00:00Z) or microseconds since 1970")
        }
        return Line(operation: operation, actor: fields.actor ?? "import", requestID: fields.requestId, time: time)
    }

    /// A send line's operation. Its `message` is read as a ``JSONValue`` and stored as its JSON (keys sorted,
    /// as the server stores a message it validated) — the message is stored as JSON, not as a typed value.
    private static func sendOperation(
        _ fields: LineFields, line: Data, fail: (String) -> LedgerCoreError
    ) throws -> LedgerOperation {
        let targets = [fields.topic, fields.condition, fields.token]
        guard targets.compactMap({ $0 }).count == 1 else {
            throw fail("send needs exactly one of topic, condition, token")
        }
        func wrap<T>(_ body: () throws -> T) throws -> T { try rethrow(fail, body) }
        let target: MessageTarget
        if let name = targets[0] {
            target = .topic(try wrap { try TopicName(name) })
        } else if let condition = targets[1] {
            target = .condition(condition)
        } else {
            target = .token(try wrap { try RegistrationToken(targets[2]!) })
        }
        let precedenceText = fields.precedence ?? ConditionPrecedence.leftToRight.rawValue
        guard let precedence = ConditionPrecedence(rawValue: precedenceText) else {
            throw fail("precedence must be left-to-right or standard")
        }
        let object = (try? JSONValue(parsing: line))?.object
        let message = object?["message"] ?? .object([:])
        guard case .object(let members) = message else { throw fail("message must be a JSON object") }
        // A topic's Live Activity send records where it goes, as the send route does (never as a broadcast: history
        // is imported, not sent), so that it is not read as a broadcast from before layout 13.
        var topicActivity: TopicActivitySend?
        if case .topic = target {
            let destination = APNsDestination(message: members, target: target)
            if destination != .device { topicActivity = TopicActivitySend(destination.topicActivity ?? .nowhere) }
        }
        return .send(target, precedence: precedence, messageJSON: message.json, topicActivity: topicActivity)
    }

    /// `body`'s value; a `LedgerCoreError` it throws comes out as the line's error (`fail`).
    private static func rethrow<T>(_ fail: (String) -> LedgerCoreError, _ body: () throws -> T) throws -> T {
        do { return try body() } catch let error as LedgerCoreError { throw fail(error.description) }
    }

    /// The members a line may have, as read (others are ignored): stored fields, so nothing is allocated
    /// per line.
    private struct LineValues {
        typealias Value = FlatJSONObject.Value
        var op, token, topic, via, platform, appId, reason, condition, precedence, actor, requestId, time: Value?
        var apnsToken: Value?

        /// Keeps `value` if `name` is a member a line may have (the last of equal names wins, as in
        /// Foundation's readers).
        mutating func set(_ name: UnsafeBufferPointer<UInt8>, _ value: Value) {
            for (bytes, field) in Self.fields where bytes.count == name.count && bytes.elementsEqual(name) {
                self[keyPath: field] = value
                return
            }
        }

        private static let fields: [(name: [UInt8], field: any WritableKeyPath<LineValues, Value?> & Sendable)] = [
            ("op", \.op), ("token", \.token), ("topic", \.topic), ("via", \.via), ("platform", \.platform),
            ("appId", \.appId), ("reason", \.reason), ("condition", \.condition), ("precedence", \.precedence),
            ("actor", \.actor), ("requestId", \.requestId), ("time", \.time), ("apnsToken", \.apnsToken),
        ].map { (Array($0.utf8), $1) }
    }

    /// The string fields a line may have.
    private struct LineFields {
        var op, token, topic, via, platform, appId, reason, condition, precedence, actor, requestId: String?
        var apnsToken: String?
    }
}
