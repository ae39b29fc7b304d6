import Foundation
import HTTPTypes
import Hummingbird
import LedgerCore
import LedgerStore
import Mustache
import NIOCore
import LedgerQueries

/// `/console`: the read-only audit console for a project's auditor and admin keys (docs/compliance.md).
/// Server-rendered HTML that works without JavaScript; CSS from the server itself; every page under a
/// Content-Security-Policy of `default-src 'self'`. Signing in trades the key, sent once in a form body, for an
/// HttpOnly, SameSite=Strict session cookie; the key never appears in a URL, a page or a log.
struct ConsoleRoutes {
    let server: ServerContext
    let sessions = ConsoleSessions()
    /// Wrong keys tried per client network (``ClientNetwork``): ``failedSignInBurst`` at once, then
    /// ``failedSignInsPerMinute``; past them every sign-in from there is 429 with `Retry-After`, the key
    /// unchecked.
    let failedSignIns: RateLimiter<ClientNetwork>
    let library: MustacheLibrary
    static let cookie = "tl_console"
    static let messagesPerPage = 50
    static let recipientsPerPage = 100
    static let failedSignInBurst = 5
    static let failedSignInsPerMinute = 5
    /// The largest sign-in form read: a key and its field name fit many times over.
    static let maximumSignInBytes = 4096

    init(server: ServerContext) {
        self.server = server
        failedSignIns = RateLimiter(
            rate: Double(Self.failedSignInsPerMinute) / 60, capacity: Double(Self.failedSignInBurst),
            now: server.configuration.rateClock)
        // The templates are constants of this file's module: a failure to compile them is a programming error
        // that every console test catches.
        library = (try? ConsoleTemplates.library()) ?? MustacheLibrary()
    }

    func register(on router: TokenPathRouter) {
        let console = router.group("/console")
        // Every page answers HEAD as it answers GET, without the body.
        func get(
            _ path: RouterPath = "",
            _ handler: @escaping @Sendable (Request, LedgerRequestContext) async throws -> Response
        ) {
            console.get(path, use: handler)
            console.head(path) { request, context in try await handler(request, context).createHeadResponse() }
        }
        get { request, _ in try await answer { try await overview(request) } }
        get("sign-in") { request, _ in signInPage(request) }
        console.post("sign-in") { request, context in try await signIn(request, context) }
        console.post("sign-out") { request, _ in signOut(request) }
        get("messages") { request, _ in try await answer { try await messages(request) } }
        get("messages/:message") { request, context in try await answer { try await message(request, context) } }
        get("messages/:message/recipients.csv") { request, context in
            try await answer { try await recipientsCSV(request, context) }
        }
        get("devices") { request, _ in try await answer { try await device(request) } }
        get("topics") { request, _ in try await answer { try await topics(request) } }
        get("topics/:topic") { request, context in try await answer { try await topic(request, context) } }
        get("log") { request, _ in try await answer { try await log(request) } }
        get("static/icon.svg") { _, _ in
            Response(
                status: .ok, headers: Self.headers(contentType: "image/svg+xml", cache: "max-age=86400"),
                body: ResponseBody(byteBuffer: ByteBuffer(string: ConsoleTemplates.icon)))
        }
        get("static/console.css") { _, _ in
            Response(
                status: .ok, headers: Self.headers(contentType: "text/css; charset=utf-8", cache: "max-age=3600"),
                body: ResponseBody(byteBuffer: ByteBuffer(string: ConsoleTemplates.css)))
        }
    }

    // MARK: Sessions

    private func session(_ request: Request) -> (id: String, session: ConsoleSessions.Session)? {
        guard let id = request.cookies[Self.cookie]?.value, let session = sessions.session(id) else { return nil }
        return (id, session)
    }

    private func signInPage(_ request: Request, error: String? = nil, status: HTTPResponse.Status = .ok) -> Response {
        page("sign-in", title: "Sign in", visitor: nil, ConsoleView.SignIn(error: error), status: status)
    }

    /// Trades an auditor or admin key for a session. The form is read only up to ``maximumSignInBytes`` (413
    /// past it), and a client network that has tried too many wrong keys gets 429 before its key is looked at.
    private func signIn(_ request: Request, _ context: LedgerRequestContext) async throws -> Response {
        if let length = request.headers[.contentLength].flatMap({ Int($0) }), length > Self.maximumSignInBytes {
            return signInPage(request, error: "The sign-in form is too large.", status: .contentTooLarge)
        }
        let network = ClientNetwork(context.remoteAddress)
        // Taken before the key is checked, so that concurrent guesses cannot all pass a check made first;
        // given back unless a wrong key was checked (a form too large, malformed or cut off tried no key).
        guard failedSignIns.take(1, for: network) == 1 else {
            let wait = failedSignIns.retryAfter(for: network)
            var response = signInPage(
                request, error: "Too many wrong keys from your address. Try again in \(wait) seconds.",
                status: .tooManyRequests)
            response.headers[.retryAfter] = String(wait)
            return response
        }
        var wrongKey = false
        defer { if !wrongKey { failedSignIns.refund(1, for: network) } }
        let body: ByteBuffer
        do {
            body = try await request.body.collect(upTo: Self.maximumSignInBytes)
        } catch is NIOTooManyBytesError {
            return signInPage(request, error: "The sign-in form is too large.", status: .contentTooLarge)
        }
        struct Form: Decodable { let key: String }
        guard let form = try? URLEncodedFormDecoder().decode(Form.self, from: String(buffer: body)) else {
            return signInPage(request, error: "Enter the project's auditor or admin key.", status: .badRequest)
        }
        let grants = server.configuration.credentials.grants(for: form.key)
            .filter { $0.role == .auditor || $0.role == .admin }
        guard let grant = grants.first else {
            wrongKey = true
            // The same answer for a wrong key and for a device's key: nothing to learn from it.
            return signInPage(request, error: "That key does not open the audit console.", status: .unauthorized)
        }
        let id = sessions.open(project: grant.project, role: grant.role)
        var response = redirect(to: "/console")
        let maxAge = Int(ConsoleSessions.lifetime.components.seconds)
        response.headers[.setCookie] =
            "\(Self.cookie)=\(id); Path=/console; Max-Age=\(maxAge); HttpOnly; SameSite=Strict\(secureAttribute)"
        return response
    }

    private func signOut(_ request: Request) -> Response {
        if let (id, _) = session(request) { sessions.close(id) }
        var response = redirect(to: "/console/sign-in")
        response.headers[.setCookie] =
            "\(Self.cookie)=; Path=/console; Max-Age=0; HttpOnly; SameSite=Strict\(secureAttribute)"
        return response
    }

    /// `; Secure` when the server speaks HTTPS: the browser then never sends the session over plain HTTP.
    private var secureAttribute: String { server.configuration.certificate == nil ? "" : "; Secure" }

    /// A page answered before its end (the redirect to sign in, a not-found page).
    struct Early: Error {
        let response: Response
    }

    /// `body`'s page, or the one it answered early with.
    func answer(_ body: () async throws -> Response) async throws -> Response {
        do {
            return try await body()
        } catch let early as Early {
            return early.response
        }
    }

    /// The signed-in project's ledger and who is signed in; else the redirect to sign in.
    func signedIn(_ request: Request) async throws -> (Ledger, ConsoleView.Visitor) {
        guard let (_, session) = session(request) else { throw Early(response: redirect(to: "/console/sign-in")) }
        let visitor = ConsoleView.Visitor(project: session.project.rawValue, role: session.role.rawValue)
        return (try await server.ledger(for: session.project), visitor)
    }

    // MARK: Pages

    private func overview(_ request: Request) async throws -> Response {
        let (ledger, visitor) = try await signedIn(request)
        let statistics = try ledger.read { try $0.statistics() }
        // The last checkpoint the server signed, read from the kept list; never a new key or signature.
        var checkpoint: ConsoleView.Overview.Checkpoint?
        if let project = session(request)?.session.project,
            let keeper = try? CheckpointKeeper.open(
                dataDirectory: server.configuration.dataDirectory, project: project,
                settings: server.configuration.checkpoints[project] ?? CheckpointSettings(), create: false),
            let last = try keeper.kept().last
        {
            checkpoint = ConsoleView.Overview.Checkpoint(size: last.size, note: last.note)
        }
        let overview = ConsoleView.Overview(
            events: statistics.events, headTime: statistics.headTime?.description, headHash: statistics.headHash,
            registered: statistics.registeredInstances, instances: statistics.instances, topics: statistics.topics,
            subscriptions: statistics.subscriptions, messages: statistics.messages, checkpoint: checkpoint)
        return page("overview", title: "Overview", visitor: visitor, overview)
    }

    /// A moment from the query (`at`: RFC 3339, a date or microseconds): the state after the last event at or
    /// before it; the head when empty. When it is not a time, throws the 400 page `invalid` renders with the
    /// error.
    func moment(_ text: String, in snapshot: LedgerSnapshot, invalid: (String) -> Response) throws -> UInt64 {
        if text.isEmpty { return try snapshot.head().seq }
        guard let time = LedgerTime(parsing: text) else {
            throw Early(response: invalid("Times are RFC 3339 (2026-11-01T00:00:00Z) or a date (2026-11-01)."))
        }
        return try snapshot.seq(atOrBefore: time)
    }

    /// `/console/messages?target=&from=&to=&before=`: newest first, 50 a page.
    private func messages(_ request: Request) async throws -> Response {
        let (ledger, visitor) = try await signedIn(request)
        let query = request.uri.queryParameters
        let target = query["target"].map(String.init) ?? ""
        let fromText = query["from"].map(String.init) ?? ""
        let toText = query["to"].map(String.init) ?? ""
        var view = ConsoleView.Messages(target: target, from: fromText, to: toText)
        let from = fromText.isEmpty ? nil : LedgerTime(parsing: fromText)
        let to = toText.isEmpty ? nil : LedgerTime(parsing: toText)
        if (!fromText.isEmpty && from == nil) || (!toText.isEmpty && to == nil) {
            view.error = "Times are RFC 3339 (2026-11-01T00:00:00Z) or a date (2026-11-01)."
            return page("messages", title: "Messages", visitor: visitor, view, status: .badRequest)
        }
        let before = query["before"].flatMap { UInt64(String($0)) }
        let result = try ledger.read { snapshot in
            try snapshot.sends(before: before, limit: Self.messagesPerPage) { send in
                (target.isEmpty || send.target.text.contains(target))
                    && (from.map { send.time >= $0 } ?? true) && (to.map { send.time < $0 } ?? true)
            }
        }
        view.sends = result.sends.map { send in
            ConsoleView.Messages.Send(
                time: send.time.description, messageID: String(send.messageID), kind: send.target.kindName,
                target: send.target.text, recipients: send.recordedCount.map { String($0) } ?? "not recorded yet")
        }
        if let next = result.nextBefore {
            var components = URLComponents()
            components.path = "/console/messages"
            components.queryItems = [
                URLQueryItem(name: "target", value: target), URLQueryItem(name: "from", value: fromText),
                URLQueryItem(name: "to", value: toText), URLQueryItem(name: "before", value: String(next)),
            ]
            view.next = components.string ?? "/console/messages"
        }
        return page("messages", title: "Messages", visitor: visitor, view)
    }

    private func replay(_ request: Request, _ context: LedgerRequestContext) async throws -> (
        MessageReplay, ConsoleView.Visitor
    ) {
        let (ledger, visitor) = try await signedIn(request)
        let text = context.parameters.get("message") ?? ""
        guard let id = UInt64(text), let replay = try ledger.read({ try MessageReplay.replay(id, in: $0) }) else {
            throw Early(
                response: page(
                    "not-found", title: "Not found", visitor: visitor,
                    ConsoleView.NotFound(detail: "There is no message \(text) in this project."), status: .notFound))
        }
        return (replay, visitor)
    }

    /// `/console/messages/{id}?start=N`: the replay beside the record, recipients 100 a page.
    private func message(_ request: Request, _ context: LedgerRequestContext) async throws -> Response {
        let (replay, visitor) = try await self.replay(request, context)
        // A start past the end shows the last page (or the empty list) rather than "101–100 of 100".
        let lastPageStart = max(0, (replay.recipientCount - 1) / Self.recipientsPerPage * Self.recipientsPerPage)
        let requested = request.uri.queryParameters["start"].flatMap { Int(String($0)) }.map { max($0, 0) } ?? 0
        let start = requested < replay.recipientCount ? requested : lastPageStart
        let end = min(start + Self.recipientsPerPage, replay.recipientCount)
        let pushCounts = AuditJSON.PushCounts(replay.pushes).map {
            ConsoleView.Message.PushCounts(
                accepted: $0.accepted, unregistered: $0.unregistered, failed: $0.failed, pending: $0.pending,
                expired: $0.expired)
        }
        let view = ConsoleView.Message(
            messageID: String(replay.messageID), matches: replay.matchesRecord,
            verdict: replay.recorded == nil
                ? "No audience is recorded for this message yet"
                : "Does not match: the replayed recipients differ from the audience recorded when it was sent",
            seq: replay.seq, time: replay.time.description, kind: replay.target.kindName, target: replay.target.text,
            rule: replay.precedence.rawValue, recipientCount: replay.recipientCount,
            replayDigest: Hex.encode(replay.recipientDigest), recorded: replay.recorded != nil,
            recordedCount: replay.recorded?.record.recipientCount,
            recordedDigest: replay.recorded.map { Hex.encode($0.record.recipientDigest) },
            audienceSeq: replay.recorded?.seq, acknowledgedCount: replay.acknowledgedCount, pushCounts: pushCounts,
            firstShown: replay.recipientCount == 0 ? 0 : start + 1, lastShown: end,
            recipients: (start..<end).map { index in
                ConsoleView.Message.Recipient(
                    token: replay.recipients[index].rawValue, acknowledged: replay.acknowledged[index],
                    // An accepted broadcast addressed every recipient (Apple does not say who held the channel);
                    // one refused, expired, never made or pending addressed nobody (yet).
                    push: replay.pushes[index]?.summary
                        ?? replay.broadcast.map { Self.broadcastNote($0) } ?? "")
            },
            next: end < replay.recipientCount ? "/console/messages/\(replay.messageID)?start=\(end)" : nil,
            messageJSON: Self.prettyJSON(replay.messageJSON),
            contentForgotten: replay.contentForgotten.map { "Content forgotten by \($0)." })
        return page("message", title: "Message \(replay.messageID)", visitor: visitor, view)
    }

    /// A recipient's line for the send's broadcast: `addressed by the broadcast …` only when Apple accepted it.
    static func broadcastNote(_ broadcast: RecordedBroadcast) -> String {
        switch broadcast.state {
        case .accepted: "addressed by the \(broadcast.summary)"
        case .pending: "not addressed yet: \(broadcast.summary)"
        case .rejected, .expired: "not addressed: \(broadcast.summary)"
        }
    }

    private func recipientsCSV(_ request: Request, _ context: LedgerRequestContext) async throws -> Response {
        let (replay, _) = try await self.replay(request, context)
        var headers = Self.headers(contentType: "text/csv; charset=utf-8")
        headers[.contentDisposition] = "attachment; filename=\"message-\(replay.messageID)-recipients.csv\""
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: replay.csv)))
    }

    // MARK: Rendering

    /// The page `name` with its title, who is signed in (`nil` on the sign-in page) and its content.
    func page<Content>(
        _ name: String, title: String, visitor: ConsoleView.Visitor?, _ content: Content,
        status: HTTPResponse.Status = .ok
    ) -> Response {
        let view = ConsoleView.Page(title: title, visitor: visitor, content: content)
        let html = library.render(view, withTemplate: name) ?? "template \(name) is missing"
        return Response(
            status: status, headers: Self.headers(contentType: "text/html; charset=utf-8"),
            body: ResponseBody(byteBuffer: ByteBuffer(string: html)))
    }

    func redirect(to location: String) -> Response {
        var headers = Self.headers(contentType: "text/plain; charset=utf-8")
        headers[.location] = location
        return Response(status: .seeOther, headers: headers)
    }

    /// Every console answer: only the server's own resources, no framing, no sniffing, no referrer, no caching
    /// of pages that carry audit data.
    static func headers(contentType: String, cache: String = "no-store") -> HTTPFields {
        [
            .contentType: contentType, .cacheControl: cache,
            .contentSecurityPolicy: "default-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
            HTTPField.Name("X-Content-Type-Options")!: "nosniff", HTTPField.Name("Referrer-Policy")!: "no-referrer",
            HTTPField.Name("X-Frame-Options")!: "DENY",
        ]
    }

    /// The message as accepted, indented for reading (the bytes as stored when they are not JSON).
    static func prettyJSON(_ bytes: [UInt8]) -> String {
        guard let object = try? JSONSerialization.jsonObject(with: Data(bytes)),
            let data = try? JSONSerialization.data(
                withJSONObject: object, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
        else { return String(decoding: bytes, as: UTF8.self) }
        return String(decoding: data, as: UTF8.self)
    }
}
