import Foundation
import LedgerCore

/// Reads JSON lines of operations into write requests, for `ledger import` (demos, tests, benchmarks).
///
/// One operation per line:
/// ```
/// {"op":"register","token":"t1","platform":"ios","appId":"com.example"}
/// {"op":"subscribe","token":"t1","topic":"news","via":"iid"}
/// {"op":"unsubscribe","token":"t1","topic":"news"}
/// {"op":"send","condition":"'news' in topics && !('sports' in topics)","precedence":"standard","message":{…}}
/// {"op":"unregister","token":"t1","reason":"uninstalled"}
/// ```
/// Optional on every line: `time` (RFC 3339 or microseconds; never earlier than the line before),
/// `actor` (default `import`), `requestId`. Consecutive lines with the same time, actor and request id
/// form one request, up to `maximumRequestOperations`.
public enum OperationImport {
    public static let maximumRequestOperations = 5_000

    /// Parses every line before anything is appended, so a malformed file changes nothing.
    ///
    /// - Throws: `LedgerCoreError.invalidArgument` naming the line and field.
    public static func requests(fromJSONLines text: String) throws -> [WriteRequest] {
        var requests: [WriteRequest] = []
        var lineNumber = 0
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            lineNumber += 1
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            let parsed = try parse(trimmed, line: lineNumber)
            let joinsLast =
                requests.last.map { last in
                    last.actor == parsed.actor && last.time == parsed.time
                        && last.requestID == (parsed.requestID ?? last.requestID)
                        && (parsed.requestID != nil || last.requestID.hasPrefix("import-line-"))
                        && last.operations.count < maximumRequestOperations
                } ?? false
            if joinsLast {
                // Appending in place: a copy of `last` would copy its whole operation list every line.
                requests[requests.count - 1].operations.append(parsed.operation)
            } else {
                requests.append(
                    WriteRequest(
                        actor: parsed.actor, requestID: parsed.requestID ?? "import-line-\(lineNumber)",
                        time: parsed.time, operations: [parsed.operation]))
            }
        }
        return requests
    }

    private struct ParsedLine {
        var operation: LedgerOperation
        var actor: String
        var requestID: String?
        var time: LedgerTime?
    }

    private static func parse(_ line: String, line number: Int) throws -> ParsedLine {
        func fail(_ message: String) -> LedgerCoreError {
            LedgerCoreError(.invalidArgument, field: "line \(number)", message)
        }
        guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
            throw fail("not a JSON object")
        }
        func string(_ key: String) throws -> String? {
            guard let value = object[key] else { return nil }
            guard let text = value as? String else { throw fail("\(key) must be a string") }
            return text
        }
        func required(_ key: String) throws -> String {
            guard let value = try string(key) else { throw fail("\(key) is required") }
            return value
        }
        func wrap<T>(_ body: () throws -> T) throws -> T {
            do { return try body() } catch let error as LedgerCoreError { throw fail(error.description) }
        }
        let token = { () throws -> RegistrationToken in
            let text = try required("token"); return try wrap { try RegistrationToken(text) }
        }
        let topic = { () throws -> TopicName in
            let text = try required("topic"); return try wrap { try TopicName(text) }
        }
        let via = { () throws -> SubscriptionChannel in
            let text = try string("via") ?? "v1"
            guard let via = SubscriptionChannel(rawValue: text) else { throw fail("via must be client, v1 or iid") }
            return via
        }
        let operation: LedgerOperation
        switch try required("op") {
        case "register":
            // The limits of the device API (`POST …/registrations`).
            for key in ["platform", "appId"] where (try string(key))?.utf8.count ?? 0 > 256 {
                throw fail("\(key) must be at most 256 bytes")
            }
            operation = .register(try token(), platform: try string("platform"), appID: try string("appId"))
        case "unregister":
            operation = .unregister(try token(), reason: try string("reason") ?? "imported")
        case "subscribe":
            operation = .subscribe(try token(), try topic(), via: try via())
        case "unsubscribe":
            operation = .unsubscribe(try token(), try topic(), via: try via())
        case "send":
            let targets = [try string("topic"), try string("condition"), try string("token")]
            guard targets.compactMap({ $0 }).count == 1 else {
                throw fail("send needs exactly one of topic, condition, token")
            }
            let target: MessageTarget
            if let name = targets[0] {
                target = .topic(try wrap { try TopicName(name) })
            } else if let condition = targets[1] {
                target = .condition(condition)
            } else {
                target = .token(try wrap { try RegistrationToken(targets[2]!) })
            }
            let precedenceText = try string("precedence") ?? ConditionPrecedence.leftToRight.rawValue
            guard let precedence = ConditionPrecedence(rawValue: precedenceText) else {
                throw fail("precedence must be left-to-right or standard")
            }
            let message = object["message"] ?? [String: Any]()
            guard JSONSerialization.isValidJSONObject(message),
                let json = try? JSONSerialization.data(withJSONObject: message, options: [.sortedKeys])
            else { throw fail("message must be a JSON object") }
            operation = .send(target, precedence: precedence, messageJSON: Array(json))
        case let other:
            throw fail("unknown op \(other); expected register, unregister, subscribe, unsubscribe or send")
        }
        var time: LedgerTime?
        if let value = object["time"] {
            if let micros = value as? Int64 {
                time = LedgerTime(microseconds: micros)
            } else if let text = value as? String, let parsed = LedgerTime(parsing: text) {
                time = parsed
            } else {
                throw fail("time must be RFC 3339 (2026-03-01T12:00:00Z) or microseconds since 1970")
            }
        }
        return ParsedLine(
            operation: operation, actor: try string("actor") ?? "import", requestID: try string("requestId"),
            time: time)
    }
}
