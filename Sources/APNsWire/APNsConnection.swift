import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import Synchronization

/// One HTTP/2 connection to an APNs endpoint (TLS, ALPN `h2`), on which requests are streams.
///
/// Written on swift-nio-http2 rather than AsyncHTTPClient: its pool asserted (debug builds) when APNs raised
/// its stream limit on an idle connection, and a provider must know each connection's state — APNs allows one
/// stream until a request has gone through, announces its limit in SETTINGS, and ends a connection with
/// GOAWAY. Streams beyond the limit the server announced wait in swift-nio-http2's stream buffer; a request is
/// only sent after the server's first SETTINGS, so no stream count is ever assumed.
///
/// Requests are frames on the connection's own pipeline, each with a stream id of its own (``StreamTable``),
/// not a child channel per stream: a child channel, its pipeline and its handler cost most of the event loop's
/// time per push (docs/performance.md, The wire: nghttpd).
///
/// - Note: Thread-safe.
final class APNsConnection: Sendable {
    /// What one request got back.
    struct Response: Sendable {
        var status: Int
        var apnsID: String?
        var body: [UInt8]
        /// `apns-request-id` (channel management and broadcasts).
        var requestID: String? = nil
        /// `apns-channel-id` (a channel's creation).
        var channelID: String? = nil
        /// `retry-after` (a 429 or 503 may carry one).
        var retryAfter: String? = nil
    }

    /// The request failed without an answer: the stream was reset, the connection closed or went away, or
    /// nothing came back in time (``timedOut``).
    struct StreamFailed: Error, CustomStringConvertible {
        let description: String
        var timedOut = false
    }

    private let channel: any Channel
    private let streams: NIOLoopBound<StreamTable>
    private let watcher: ConnectionWatcher
    private let host: String

    private init(channel: any Channel, streams: NIOLoopBound<StreamTable>, watcher: ConnectionWatcher, host: String) {
        self.channel = channel
        self.streams = streams
        self.watcher = watcher
        self.host = host
    }

    /// Connects to `host:port` on `loop` and waits for the server's first SETTINGS (its stream limit), at most
    /// `timeout` in all.
    static func connect(
        host: String, port: Int, tls: NIOSSLContext, on loop: any EventLoop, timeout: TimeAmount = .seconds(10)
    ) -> EventLoopFuture<APNsConnection> {
        let watcher = ConnectionWatcher(loop: loop)
        let bootstrap = ClientBootstrap(group: loop)
            .connectTimeout(timeout)
            .channelOption(.socketOption(.so_keepalive), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    // SNI only for names: an IP address is not a server name (RFC 6066).
                    let serverName = host.first.map { $0.isLetter } == true ? host : nil
                    let handler = try NIOSSLClientHandler(context: tls, serverHostname: serverName)
                    try channel.pipeline.syncOperations.addHandler(handler)
                    try channel.pipeline.syncOperations.addHandler(FlushCoalescer())
                    try channel.pipeline.syncOperations.addHandler(NIOHTTP2Handler(mode: .client))
                    try channel.pipeline.syncOperations.addHandler(watcher)
                    let streams = StreamTable { watcher.retire(channel) }
                    try channel.pipeline.syncOperations.addHandler(streams)
                    watcher.streams = NIOLoopBound(streams, eventLoop: channel.eventLoop)
                }
            }
        return bootstrap.connect(host: host, port: port).flatMapError { error in
            watcher.fail(error)
            return loop.makeFailedFuture(error)
        }.flatMap { channel in
            let deadline = channel.eventLoop.scheduleTask(in: timeout) {
                watcher.fail(
                    APNsConnection.StreamFailed(
                        description: "no SETTINGS from the server within \(timeout)", timedOut: true))
                channel.close(promise: nil)
            }
            return watcher.firstSettings.futureResult.flatMapThrowing {
                deadline.cancel()
                guard let streams = watcher.streams else {
                    throw StreamFailed(description: "the connection has no stream table")
                }
                return APNsConnection(channel: channel, streams: streams, watcher: watcher, host: host)
            }.flatMapErrorThrowing { error in
                deadline.cancel()
                channel.close(promise: nil)
                throw error
            }
        }
    }

    /// Whether new requests may use it: open, and no GOAWAY received.
    var isUsable: Bool { channel.isActive && !watcher.wentAway }

    /// A connection that failed to connect, timed out, or was closed: its channel's identity, for logs.
    var identifier: ObjectIdentifier { ObjectIdentifier(channel) }

    /// One request: the path, the headers after the pseudo-headers, and the body.
    struct Request: Sendable {
        var path: String
        var headers: [(String, String)]
        var body: [UInt8]
        /// `POST` for pushes and broadcasts; `GET` and `DELETE` too for channel management.
        var method: String = "POST"
    }

    /// Sends one request on a new stream and returns the answer.
    ///
    /// - Throws: ``StreamFailed`` (or a NIO error) when no answer came: the push may or may not have arrived.
    func send(_ request: Request, timeout: TimeAmount = .seconds(30)) async throws -> Response {
        try await send(batch: [request], timeout: timeout)[0].get()
    }

    /// Sends `requests`, each on a stream of its own, and returns their answers in order once every one has
    /// answered or failed: one task on the connection's event loop writes their frames (one flush,
    /// ``FlushCoalescer``), and the caller resumes once for them all.
    ///
    /// The requests are HTTP/2 frames (no HTTP/1 translation); `apns-id`, new for every push, is sent without
    /// indexing, so that it does not push the headers every push repeats (the provider token, the topic) out of
    /// HPACK's table. A failure (``StreamFailed``, a NIO error) means no answer came: the push may or may not have
    /// arrived.
    func send(batch requests: [Request], timeout: TimeAmount = .seconds(30)) async -> [Result<Response, any Error>] {
        let loop = channel.eventLoop
        let promises = requests.map { _ in loop.makePromise(of: Response.self) }
        guard isUsable else {
            let closed = StreamFailed(description: "the connection is closed or going away")
            for promise in promises { promise.fail(closed) }
            return requests.map { _ in .failure(closed) }
        }
        let frames = requests.map { (head: header(of: $0), body: $0.body) }
        let deadline = NIODeadline.now() + timeout
        loop.execute { [streams] in
            streams.value.start(frames, answering: promises, deadline: deadline)
        }
        // `whenAllComplete` never fails: each result is in the array.
        return (try? await EventLoopFuture.whenAllComplete(promises.map(\.futureResult), on: loop).get())
            ?? requests.map { _ in .failure(StreamFailed(description: "no answer")) }
    }

    private func header(of request: Request) -> HPACKHeaders {
        var fields = HPACKHeaders()
        fields.reserveCapacity(request.headers.count + 5)
        fields.add(name: ":method", value: request.method)
        fields.add(name: ":scheme", value: "https")
        fields.add(name: ":authority", value: host)
        fields.add(name: ":path", value: request.path, indexing: .nonIndexable)
        for (name, value) in request.headers {
            fields.add(name: name, value: value, indexing: name == "apns-id" ? .nonIndexable : .indexable)
        }
        fields.add(name: "content-length", value: String(request.body.count))
        return fields
    }

    /// Closes the connection (its streams under way fail).
    func close() {
        channel.close(promise: nil)
    }
}

/// Watches the connection's own frames: the server's first SETTINGS, and GOAWAY.
private final class ConnectionWatcher: ChannelInboundHandler, Sendable {
    typealias InboundIn = HTTP2Frame
    typealias InboundOut = HTTP2Frame

    private struct State {
        var settingsSeen = false
        var wentAway = false
        var streams: NIOLoopBound<StreamTable>?
    }

    /// How long streams under way may still answer after GOAWAY.
    static let goAwayGrace: TimeAmount = .seconds(10)

    let firstSettings: EventLoopPromise<Void>
    private let state = Mutex(State())

    init(loop: any EventLoop) {
        firstSettings = loop.makePromise()
    }

    var wentAway: Bool { state.withLock { $0.wentAway } }

    /// The connection's stream table, set when the pipeline is made.
    var streams: NIOLoopBound<StreamTable>? {
        get { state.withLock { $0.streams } }
        set { state.withLock { $0.streams = newValue } }
    }

    func fail(_ error: any Error) { firstSettings.fail(error) }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .settings(.settings):
            let first = state.withLock { state in
                defer { state.settingsSeen = true }
                return !state.settingsSeen
            }
            if first { firstSettings.succeed(()) }
        case .goAway:
            // APNs is ending the connection: no new stream goes on it; the streams it took may still answer,
            // for a grace, then the connection is closed (those left fail, and are sent again elsewhere).
            retire(context.channel)
        default:
            break
        }
        context.fireChannelRead(data)
    }

    /// Takes no new request on `channel`, and closes it after ``goAwayGrace``: a GOAWAY, or every stream id used.
    func retire(_ channel: any Channel) {
        state.withLock { $0.wentAway = true }
        channel.eventLoop.scheduleTask(in: Self.goAwayGrace) { channel.close(promise: nil) }
    }

    func channelInactive(context: ChannelHandlerContext) {
        state.withLock { $0.wentAway = true }
        firstSettings.fail(APNsConnection.StreamFailed(description: "the connection closed"))
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        firstSettings.fail(error)
        context.close(promise: nil)
    }
}

/// Passes a connection's flushes on to TLS once per turn of its event loop: every push written in the same turn
/// leaves in one TLS write (one system call, and fewer, fuller records for the server to read) rather than one
/// each. Writes pass at once; only the flush waits, behind the tasks already queued on the loop.
private final class FlushCoalescer: ChannelOutboundHandler {
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private var flushScheduled = false

    func flush(context: ChannelHandlerContext) {
        guard !flushScheduled else { return }
        flushScheduled = true
        context.eventLoop.assumeIsolated().execute {
            self.flushScheduled = false
            context.flush()
        }
    }
}

/// The connection's streams under way, on its own pipeline: each request's HEADERS and DATA written with a new
/// stream id, each answer's frames matched back to its request by that id. A stream ends with its answer (the
/// frame that ends it), with a reset or a GOAWAY that refuses it (``StreamClosedEvent``), when its frames cannot be
/// written, when the connection closes, or at its deadline (then it is reset). Touched on the event loop only.
final class StreamTable: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    /// Error bodies are a small JSON object; anything larger is not APNs.
    static let maximumBody = 64 * 1024
    /// Client stream ids are odd and below 2^31; a connection that has used them all takes no more requests.
    static let lastStreamID = Int32.max
    /// The connection's receive window, HTTP/2's default.
    static let connectionWindow = 65_535
    /// How often streams past their deadline are looked for.
    static let sweepInterval: TimeAmount = .milliseconds(250)

    private struct Pending {
        let promise: EventLoopPromise<APNsConnection.Response>
        let deadline: NIODeadline
        var response: APNsConnection.Response?
    }

    private var pending: [HTTP2StreamID: Pending] = [:]
    private var nextStreamID: Int32 = 1
    private var context: ChannelHandlerContext?
    private var sweeper: RepeatedTask?
    /// Whether every stream id has been used.
    private var exhausted = false
    /// Called once every stream id has been used: the connection must be replaced.
    private let onExhausted: () -> Void

    init(onExhausted: @escaping () -> Void) {
        self.onExhausted = onExhausted
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        let table = NIOLoopBound(self, eventLoop: context.eventLoop)
        sweeper = context.eventLoop.scheduleRepeatedTask(initialDelay: Self.sweepInterval, delay: Self.sweepInterval) {
            _ in table.value.sweep(now: .now())
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        sweeper?.cancel()
        failAll(APNsConnection.StreamFailed(description: "the connection closed"))
    }

    /// Writes each request on a new stream, and flushes once; `promises[i]` gets the answer to `requests[i]`.
    func start(
        _ requests: [(head: HPACKHeaders, body: [UInt8])],
        answering promises: [EventLoopPromise<APNsConnection.Response>],
        deadline: NIODeadline
    ) {
        guard let context, context.channel.isActive else {
            let closed = APNsConnection.StreamFailed(description: "the connection is closed")
            for promise in promises { promise.fail(closed) }
            return
        }
        for (request, promise) in zip(requests, promises) {
            guard !exhausted else {
                promise.fail(APNsConnection.StreamFailed(description: "the connection has used every stream id"))
                continue
            }
            let id = HTTP2StreamID(nextStreamID)
            if nextStreamID > Self.lastStreamID - 2 {
                exhausted = true
                onExhausted()
            } else {
                nextStreamID += 2
            }
            pending[id] = Pending(promise: promise, deadline: deadline)
            context.write(
                wrapOutboundOut(HTTP2Frame(streamID: id, payload: .headers(.init(headers: request.head)))), promise: nil
            )
            let written = context.eventLoop.makePromise(of: Void.self)
            let data = HTTP2Frame.FramePayload.data(
                .init(data: .byteBuffer(ByteBuffer(bytes: request.body)), endStream: true))
            context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: data)), promise: written)
            written.futureResult.assumeIsolated().whenFailure { [self] error in end(id, with: .failure(error)) }
        }
        context.flush()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        guard var stream = pending[frame.streamID] else { return }
        let endStream: Bool
        switch frame.payload {
        case .headers(let headers):
            endStream = headers.endStream
            // An informational (1xx) head precedes the answer; trailers follow it.
            if stream.response == nil, let status = headers.headers.first(name: ":status").flatMap({ Int($0) }),
                status >= 200
            {
                stream.response = APNsConnection.Response(
                    status: status, apnsID: headers.headers.first(name: "apns-id"), body: [],
                    requestID: headers.headers.first(name: "apns-request-id"),
                    channelID: headers.headers.first(name: "apns-channel-id"),
                    retryAfter: headers.headers.first(name: "retry-after"))
            }
        case .data(let data):
            endStream = data.endStream
            guard case .byteBuffer(let buffer) = data.data, var response = stream.response,
                response.body.count + buffer.readableBytes <= Self.maximumBody
            else {
                end(
                    frame.streamID,
                    with: .failure(
                        APNsConnection.StreamFailed(description: "an answer body over 64 KiB, or before the head")))
                reset(frame.streamID)
                return
            }
            response.body.append(contentsOf: buffer.readableBytesView)
            stream.response = response
        default:
            return
        }
        pending[frame.streamID] = stream
        // The stream is closed on both sides now; swift-nio-http2 forgets it. (Resetting it as well — as closing a
        // stream's channel did — sent RST_STREAM(CANCEL), and nghttpd, like any server that limits resets since
        // CVE-2023-44487, ended the connection with GOAWAY after about a thousand of them.)
        guard endStream else { return }
        if let response = stream.response {
            end(frame.streamID, with: .success(response))
        } else {
            end(
                frame.streamID,
                with: .failure(APNsConnection.StreamFailed(description: "a stream ended without an answer")))
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // The connection's receive window (the answers' bodies use it up): given back once half is used, as
        // swift-nio-http2's stream multiplexer would.
        if let window = event as? NIOHTTP2WindowUpdatedEvent, window.streamID == .rootStream,
            let size = window.inboundWindowSize, size <= Self.connectionWindow / 2
        {
            context.writeAndFlush(
                wrapOutboundOut(
                    HTTP2Frame(
                        streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: Self.connectionWindow - size)
                    )),
                promise: nil)
        }
        // A reset, a GOAWAY that refuses the stream, or a stream dropped from the buffer: no answer is coming.
        if let closed = event as? StreamClosedEvent, pending[closed.streamID] != nil {
            let reason = closed.reason.map { " (\($0))" } ?? ""
            end(
                closed.streamID,
                with: .failure(APNsConnection.StreamFailed(description: "the stream closed without an answer\(reason)"))
            )
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        failAll(APNsConnection.StreamFailed(description: "the connection closed"))
        context.fireChannelInactive()
    }

    /// Fails the streams past their deadline, and resets them.
    private func sweep(now: NIODeadline) {
        let late = pending.filter { $0.value.deadline <= now }.map(\.key)
        for id in late {
            end(id, with: .failure(APNsConnection.StreamFailed(description: "no answer in time", timedOut: true)))
            reset(id)
        }
    }

    private func end(_ id: HTTP2StreamID, with result: Result<APNsConnection.Response, any Error>) {
        guard let stream = pending.removeValue(forKey: id) else { return }
        stream.promise.completeWith(result)
    }

    private func reset(_ id: HTTP2StreamID) {
        context?.writeAndFlush(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .rstStream(.cancel))), promise: nil)
    }

    private func failAll(_ error: any Error) {
        let streams = pending
        pending.removeAll()
        for stream in streams.values { stream.promise.fail(error) }
    }
}
