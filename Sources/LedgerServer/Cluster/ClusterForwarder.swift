import AsyncHTTPClient
import FCMWire
import HTTPTypes
import Hummingbird
import NIOCore
import NIOHTTP1
import Synchronization

/// Sends a request this node does not serve to the node that does (a project's leader), and answers with
/// what that node answers — status, headers and body, streamed, so long polls and event streams pass through.
///
/// One AsyncHTTPClient for the process keeps connections to each peer alive between requests, up to 256 per
/// peer (the shared client's 8 held forwarded writes to 8 in flight: 650 a second through a follower, measured).
/// Requests that stay open — event streams and long polls, which any device may open with the public client
/// key — go through a client of their own (``streams``), capped at ``maximumOpenStreams``: they can never take
/// the connections writes are forwarded on. The caller's own credentials go along: the peer authenticates the
/// request as this node did.
struct ClusterForwarder: Sendable {
    /// Lives as long as the process (a static is never deinitialized, so it needs no shutdown).
    static let client = peerClient(connectionsPerPeer: 256)

    /// The largest answer to a forwarded write that is read whole before it is written (larger ones are streamed).
    static let collectedAnswerBytes = 1 << 20

    /// The client of forwarded event streams and long polls: one connection each while it lasts.
    static let streams = peerClient(connectionsPerPeer: maximumOpenStreams)

    /// A client of the peers: keep-alive connections, up to `connectionsPerPeer` a peer. A peer's answer is the
    /// answer — a redirect is passed on to the caller, never followed — and no tracing span is made per request
    /// (the process bootstraps no tracer; the span's bookkeeping was 2 % of a forwarding follower's samples).
    private static func peerClient(connectionsPerPeer: Int) -> HTTPClient {
        var configuration = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            connectionPool: .init(
                idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: connectionsPerPeer))
        configuration.tracing.tracer = nil
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    /// How many event streams and long polls this node forwards at once; more get 503 with `Retry-After` (a
    /// device retries them, against whichever node it reaches).
    static let maximumOpenStreams = 4096
    /// The streams open now (``maximumOpenStreams``).
    static let openStreams = Atomic<Int>(0)

    /// This node's id, sent in ``HTTPField/Name/ledgerForwardedBy``.
    let nodeID: String
    /// This node's peer secret, sent in ``HTTPField/Name/ledgerPeer`` so that the receiver honours
    /// ``HTTPField/Name/ledgerForwardedBy`` (``Request/isForwardedByPeer(_:)``); without one, it routes the
    /// request as a client's.
    let peerSecret: String?
    let maximumBodyBytes: Int
    /// The forwarded requests in flight, given up when their node stops serving them.
    let watch: ForwardWatch

    /// Hop-by-hop headers, which are the connection's and not the request's (RFC 9110 §7.6.1), and the
    /// ones the client sets itself.
    private static let notForwarded: Set<String> = [
        "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "host",
        "content-length", HTTPField.Name.ledgerForwardedBy.canonicalName, HTTPField.Name.ledgerPeer.canonicalName,
    ]

    /// Forwards `request` to the node at `baseURL` for as long as `stillThere` says that node serves it (asked at
    /// each change of the cluster's routing, and at least every 5 s: ``ForwardWatch``): when it stops (the leader died
    /// and another was elected), the request is given up with 503.
    func forward(
        _ request: Request, to baseURL: String, while stillThere: @escaping @Sendable () -> Bool
    ) async throws -> Response {
        let forwarding = Task { try await self.forward(request, to: baseURL) }
        let gaveUp = Atomic<Bool>(false)
        let id = watch.begin(stillThere: stillThere) {
            gaveUp.store(true, ordering: .relaxed)
            forwarding.cancel()
        }
        defer { watch.end(id) }
        do {
            return try await withTaskCancellationHandler {
                try await forwarding.value
            } onCancel: {
                forwarding.cancel()
            }
        } catch  where gaveUp.load(ordering: .relaxed) {
            throw FCMError.unavailable("The node that served this request went away; retry.")
        }
    }

    private func forward(_ request: Request, to baseURL: String) async throws -> Response {
        guard request.staysOpen else { return try await forward(request, to: baseURL, through: Self.client) }
        let slot = OpenStream()
        guard slot.isWithinLimit else {
            var error = FCMError.unavailable("This node forwards as many streams as it may; retry.")
            error.headers[.retryAfter] = "1"
            throw error
        }
        var response = try await forward(request, to: baseURL, through: Self.streams)
        // Counted for as long as the answer lives: until its body is written, or it is dropped unwritten.
        let body = response.body
        response.body = ResponseBody { writer in
            try await body.write(writer)
            slot.keep()
        }
        return response
    }

    /// One forwarded stream, counted in ``openStreams`` from its making until it is released.
    private final class OpenStream: Sendable {
        /// Whether the count, this one included, is within ``maximumOpenStreams``.
        let isWithinLimit =
            ClusterForwarder.openStreams.wrappingAdd(1, ordering: .relaxed).newValue
            <= ClusterForwarder.maximumOpenStreams

        /// Nothing: the closure that calls it holds the slot until it is released.
        func keep() {}

        deinit { ClusterForwarder.openStreams.wrappingSubtract(1, ordering: .relaxed) }
    }

    private func forward(_ request: Request, to baseURL: String, through client: HTTPClient) async throws -> Response {
        let body: ByteBuffer
        do {
            body = try await request.body.collect(upTo: maximumBodyBytes)
        } catch {
            // The leader's own answer to a body over the limit (the routes read bodies through JSONBody).
            throw FCMError.bodyTooLarge(limit: maximumBodyBytes)
        }
        var outgoing = HTTPClientRequest(url: baseURL + (request.head.path ?? "/"))
        outgoing.method = NIOHTTP1.HTTPMethod(rawValue: request.method.rawValue)
        for field in request.headers where !Self.notForwarded.contains(field.name.canonicalName) {
            outgoing.headers.add(name: field.name.rawName, value: field.value)
        }
        outgoing.headers.add(name: HTTPField.Name.ledgerForwardedBy.rawName, value: nodeID)
        if let peerSecret { outgoing.headers.add(name: HTTPField.Name.ledgerPeer.rawName, value: peerSecret) }
        if body.readableBytes > 0 || request.method != .get { outgoing.body = .bytes(body) }
        // Reads may be long polls and event streams; writes are answered once the leader's commit is durable.
        let timeout: TimeAmount = request.method == .get ? .hours(1) : .seconds(30)
        let answer: HTTPClientResponse
        do {
            answer = try await client.execute(outgoing, timeout: timeout)
        } catch {
            throw FCMError.unavailable("The node serving this request could not be reached; retry.")
        }
        var headers = HTTPFields()
        for header in answer.headers where !Self.notForwarded.contains(header.name.lowercased()) {
            if let name = HTTPField.Name(header.name) { headers.append(HTTPField(name: name, value: header.value)) }
        }
        let status = HTTPResponse.Status(code: Int(answer.status.code), reasonPhrase: answer.status.reasonPhrase)
        // A write's answer is a small JSON document: read whole, and written in one piece, rather than streamed
        // through a task of its own. Anything else — a read, an answer of unknown or large size — is streamed.
        if request.method != .get, let length = answer.headers.first(name: "content-length").flatMap(Int.init),
            length <= Self.collectedAnswerBytes
        {
            do {
                return Response(
                    status: status, headers: headers,
                    body: ResponseBody(byteBuffer: try await answer.body.collect(upTo: length)))
            } catch {
                throw FCMError.unavailable("The node serving this request stopped answering; retry.")
            }
        }
        return Response(status: status, headers: headers, body: ResponseBody(asyncSequence: answer.body))
    }
}

extension Request {
    /// Whether the request stays open while it waits for messages: an event stream, or a long poll.
    var staysOpen: Bool {
        guard method == .get else { return false }
        let path = uri.path
        if path.hasSuffix("/messages:stream") { return true }
        guard path.hasSuffix("/messages") else { return false }
        let query = uri.queryParameters
        return query["waitSeconds"] != nil || query["wait_seconds"] != nil
    }
}

extension HTTPField.Name {
    /// Set by a node that forwards a request to another: the receiver serves it or refuses it, never forwards
    /// it again — when the request also carries a peer secret (``ledgerPeer``); from a client it is ignored.
    static let ledgerForwardedBy = HTTPField.Name("x-ledger-forwarded-by")!
    /// The forwarding node's peer secret (one of `cluster.peerKeys`): what makes ``ledgerForwardedBy`` a peer's.
    static let ledgerPeer = HTTPField.Name("x-ledger-peer")!
    /// The seq through which a write's answer is applied (the head when it was answered).
    static let ledgerSeq = HTTPField.Name("x-ledger-seq")!
    /// A read names the seq it must see: it waits (up to five seconds) for this node's replica to reach it.
    static let ledgerMinSeq = HTTPField.Name("x-ledger-min-seq")!
}
