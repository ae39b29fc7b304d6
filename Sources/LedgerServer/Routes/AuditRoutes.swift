import Foundation
import Hummingbird
import LedgerCore
import LedgerStore
import FCMWire
import LedgerQueries

/// The audit API (SPEC §4.5): read-only, for the auditor or admin credential. The same answers as
/// `ledger replay` and `ledger audit`, in the same JSON shapes (``AuditJSON``), paged where lists can be long,
/// and the event log as JSON lines.
///
/// These responses carry registration tokens by design (they are audit data); nothing here is logged.
struct AuditRoutes {
    let server: ServerContext
    static let defaultPageSize = 1000
    static let maximumPageSize = 10_000

    func register(on router: TokenPathRouter) {
        let audit = router.group("/v1/projects/:project/audit")
            .projectRoutes(server, roles: [.auditor, .admin])
        let project = audit.group(context: ProjectRequestContext.self)
        project.get("messages/:message") { request, context in try await replay(request, context) }
        audit.group("instances/:token").add(middleware: RegistrationInPath(activity: server.ledgers.activity))
            .group(context: RegistrationRequestContext.self)
            .get { request, context in try await instance(request, context) }
        project.get("topics/:topic") { request, context in try await topic(request, context) }
        project.get("topics/:topic/history") { request, context in try await history(request, context) }
        project.get("events") { request, context in try await events(request, context) }
        project.get("erasures") { _, context in
            try JSONResponse.encoded(try context.ledger.read { AuditJSON.Erasures(try $0.erasures()) })
        }
    }

    /// `GET …/audit/messages/{id}`: the replay of a message with its recipients paged in byte order.
    private func replay(_ request: Request, _ context: ProjectRequestContext) async throws -> Response {
        let project = context.project
        let text = try context.parameters.decoded("message")
        let id = try Parameters.messageID(text)
        let page = try PageRequest(request, defaultSize: Self.defaultPageSize, maximumSize: Self.maximumPageSize)
        let body: AuditJSON.Replay = try context.ledger.read { snapshot in
            guard let replay = try MessageReplay.replay(id, in: snapshot) else {
                throw FCMError.notFound("Message \(id) was not found in project \(project).")
            }
            let (slice, next) = try Self.page(replay.recipients, page)
            var object = AuditJSON.replay(replay, project: project, recipients: slice)
            object.nextPageToken = next
            return object
        }
        return try JSONResponse.encoded(body)
    }

    /// `GET …/audit/instances/{token}?at=|atSeq=`: the instance's history and its topics at the moment.
    private func instance(_ request: Request, _ context: RegistrationRequestContext) async throws -> Response {
        let project = context.project
        let token = context.token
        let body: AuditJSON.Instance = try context.ledger.read { snapshot in
            guard let audit = try snapshot.instanceAudit(token, at: try Self.moment(request, snapshot)) else {
                throw FCMError.notFound("The registration token was never registered in project \(project).")
            }
            return try AuditJSON.instance(audit, in: snapshot)
        }
        return try JSONResponse.encoded(body)
    }

    /// `GET …/audit/topics/{topic}?at=|atSeq=&members=true`: the count at the moment and, if asked, the
    /// members paged in byte order.
    private func topic(_ request: Request, _ context: ProjectRequestContext) async throws -> Response {
        let project = context.project
        let topic = try topicName(context)
        let includeMembers = request.uri.queryParameters["members"] == "true"
        let page = try PageRequest(request, defaultSize: Self.defaultPageSize, maximumSize: Self.maximumPageSize)
        let body: AuditJSON.Topic = try context.ledger.read { snapshot in
            guard
                let audit = try snapshot.topicAudit(
                    topic, at: try Self.moment(request, snapshot), members: includeMembers)
            else { throw FCMError.notFound("Topic \(topic) never had a subscriber in project \(project).") }
            var slice: ArraySlice<RegistrationToken>?
            var next: String?
            if let members = audit.members { (slice, next) = try Self.page(members, page) }
            var object = try AuditJSON.topic(audit, members: slice, history: nil, in: snapshot)
            object.nextPageToken = next
            return object
        }
        return try JSONResponse.encoded(body)
    }

    /// `GET …/audit/topics/{topic}/history?pageSize=&pageToken=`: the subscriber count after each event that
    /// changed it, in seq order; the page token is the last seq of the previous page.
    private func history(_ request: Request, _ context: ProjectRequestContext) async throws -> Response {
        let project = context.project
        let topic = try topicName(context)
        let page = try PageRequest(request, defaultSize: Self.defaultPageSize, maximumSize: Self.maximumPageSize)
        var after: UInt64 = 0
        if let token = page.after {
            guard let seq = UInt64(token) else {
                throw FCMError.invalidArgument("pageToken must be a seq from a previous page", field: "pageToken")
            }
            after = seq
        }
        let body: AuditJSON.Topic = try context.ledger.read { snapshot in
            guard let audit = try snapshot.topicAudit(topic, members: false) else {
                throw FCMError.notFound("Topic \(topic) never had a subscriber in project \(project).")
            }
            let remaining = audit.history.drop { $0.seq <= after }
            let slice = remaining.prefix(page.size)
            var object = try AuditJSON.topic(audit, members: nil, history: slice, in: snapshot)
            if remaining.count > slice.count, let last = slice.last { object.nextPageToken = String(last.seq) }
            return object
        }
        return try JSONResponse.encoded(body)
    }

    /// `GET …/audit/events?fromSeq=&limit=`: events as JSON lines (`application/x-ndjson`), the `ledger log`
    /// export. At most `limit` lines (default 1000, at most 10,000); continue from the last seq + 1.
    private func events(_ request: Request, _ context: ProjectRequestContext) async throws -> Response {
        let query = request.uri.queryParameters
        var from: UInt64 = 1
        if let text = query["fromSeq"] ?? query["from_seq"] {
            guard let value = UInt64(text), value >= 1 else {
                throw FCMError.invalidArgument("fromSeq must be a seq (1 or more)", field: "fromSeq")
            }
            from = value
        }
        var limit = Self.defaultPageSize
        if let text = query["limit"] {
            guard let value = Int(text), value >= 1 else {
                throw FCMError.invalidArgument("limit must be a positive integer", field: "limit")
            }
            limit = min(value, Self.maximumPageSize)
        }
        var bytes: [UInt8] = []
        try context.ledger.readLog { snapshot in
            var count = 0
            try snapshot.forEachChainedEvent(from: from) { event, previous, hash in
                EventJSON.write(event, prevHash: previous, hash: hash, into: &bytes)
                bytes.append(UInt8(ascii: "\n"))
                count += 1
                return count < limit
            }
        }
        return Response(
            status: .ok, headers: [.contentType: "application/x-ndjson; charset=UTF-8"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    private func topicName(_ context: ProjectRequestContext) throws -> TopicName {
        do {
            return try TopicName(try context.parameters.decoded("topic"), field: "topic")
        } catch let error as LedgerCoreError {
            throw FCMError.invalidArgument(error)
        }
    }

    /// `at` (RFC 3339, a date, or microseconds) or `atSeq`: the seq whose state is asked about (the head
    /// when neither is given).
    static func moment(_ request: Request, _ snapshot: LedgerSnapshot) throws -> UInt64 {
        let query = request.uri.queryParameters
        let head = try snapshot.head().seq
        switch (query["at"].map(String.init), (query["atSeq"] ?? query["at_seq"]).map(String.init)) {
        case (.some, .some):
            throw FCMError.invalidArgument("give at or atSeq, not both", field: "at")
        case (.some(let text), nil):
            guard let time = LedgerTime(parsing: text) else {
                throw FCMError.invalidArgument(
                    "at must be RFC 3339 (2026-03-01T12:00:00Z), a date (2026-03-01) or microseconds", field: "at")
            }
            return try snapshot.seq(atOrBefore: time)
        case (nil, .some(let text)):
            guard let seq = UInt64(text), seq <= head else {
                throw FCMError.invalidArgument("atSeq must be a seq from 0 to the head (\(head))", field: "atSeq")
            }
            return seq
        case (nil, nil):
            return head
        }
    }

    /// One page of `tokens` (byte order) after the page token, and the next page token if more follow.
    static func page(_ tokens: [RegistrationToken], _ page: PageRequest) throws -> (
        ArraySlice<RegistrationToken>, String?
    ) {
        var start = 0
        if let after = page.after {
            guard let last = try? RegistrationToken(after) else {
                throw FCMError.invalidArgument("pageToken must come from a previous page", field: "pageToken")
            }
            // Binary search: the first token after `last`.
            var low = 0
            var high = tokens.count
            while low < high {
                let middle = (low + high) / 2
                if last < tokens[middle] { high = middle } else { low = middle + 1 }
            }
            start = low
        }
        let slice = tokens[start..<min(tokens.count, start + page.size)]
        let next = slice.endIndex < tokens.count ? slice.last?.rawValue : nil
        return (slice, next)
    }
}
