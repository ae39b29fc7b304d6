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
/// - Note: Thread-safe.
final class APNsConnection: Sendable {
    /// What one request got back.
    struct Response: Sendable {
        var status: Int
        var apnsID: String?
        var body: [UInt8]
    }

    /// The request failed without an answer: the stream was reset, the connection closed or went away, or
    /// nothing came back in time (``timedOut``).
    struct StreamFailed: Error, CustomStringConvertible {
        let description: String
        var timedOut = false
    }

    private let channel: any Channel
    private let multiplexer: NIOHTTP2Handler.StreamMultiplexer
    private let watcher: ConnectionWatcher
    private let host: String

    private init(
        channel: any Channel, multiplexer: NIOHTTP2Handler.StreamMultiplexer, watcher: ConnectionWatcher, host: String
    ) {
        self.channel = channel
        self.multiplexer = multiplexer
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
                    let multiplexer = try channel.pipeline.syncOperations.configureHTTP2Pipeline(
                        mode: .client, connectionConfiguration: .init(), streamConfiguration: .init(),
                        inboundStreamInitializer: { channel in channel.close() })
                    try channel.pipeline.syncOperations.addHandler(watcher)
                    watcher.multiplexer = multiplexer
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
                guard let multiplexer = watcher.multiplexer else {
                    throw StreamFailed(description: "the connection has no HTTP/2 multiplexer")
                }
                return APNsConnection(channel: channel, multiplexer: multiplexer, watcher: watcher, host: host)
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
    }

    /// Sends one request on a new stream and returns the answer.
    ///
    /// - Throws: ``StreamFailed`` (or a NIO error) when no answer came: the push may or may not have arrived.
    func send(_ request: Request, timeout: TimeAmount = .seconds(30)) async throws -> Response {
        try await send(batch: [request], timeout: timeout)[0].get()
    }

    /// Sends `requests`, each on a stream of its own, and returns their answers in order once every one has
    /// answered or failed: one task on the connection's event loop makes the streams and writes them (one flush,
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
        let heads = requests.map { header(of: $0) }
        loop.execute { [multiplexer] in
            for (index, request) in requests.enumerated() {
                Self.start(
                    head: heads[index], body: request.body, on: multiplexer, promise: promises[index], timeout: timeout)
            }
        }
        // `whenAllComplete` never fails: each result is in the array.
        return (try? await EventLoopFuture.whenAllComplete(promises.map(\.futureResult), on: loop).get())
            ?? requests.map { _ in .failure(StreamFailed(description: "no answer")) }
    }

    private func header(of request: Request) -> HPACKHeaders {
        var fields = HPACKHeaders()
        fields.reserveCapacity(request.headers.count + 5)
        fields.add(name: ":method", value: "POST")
        fields.add(name: ":scheme", value: "https")
        fields.add(name: ":authority", value: host)
        fields.add(name: ":path", value: request.path, indexing: .nonIndexable)
        for (name, value) in request.headers {
            fields.add(name: name, value: value, indexing: name == "apns-id" ? .nonIndexable : .indexable)
        }
        fields.add(name: "content-length", value: String(request.body.count))
        return fields
    }

    /// Makes a stream and writes one request on it (on the connection's event loop); `promise` gets its answer.
    private static func start(
        head: HPACKHeaders, body: [UInt8], on multiplexer: NIOHTTP2Handler.StreamMultiplexer,
        promise: EventLoopPromise<Response>, timeout: TimeAmount
    ) {
        let created = promise.futureResult.eventLoop.makePromise(of: (any Channel).self)
        multiplexer.createStreamChannel(promise: created) { stream in
            stream.eventLoop.makeCompletedFuture {
                try stream.pipeline.syncOperations.addHandler(ResponseCollector(promise: promise))
            }
        }
        created.futureResult.whenComplete { result in
            switch result {
            case .failure(let error):
                promise.fail(error)  // every promise is completed, or NIO reports it leaked
            case .success(let stream):
                stream.write(HTTP2Frame.FramePayload.headers(.init(headers: head)), promise: nil)
                let data = HTTP2Frame.FramePayload.data(
                    .init(data: .byteBuffer(ByteBuffer(bytes: body)), endStream: true))
                stream.writeAndFlush(data).whenFailure { promise.fail($0) }
                let timer = stream.eventLoop.scheduleTask(in: timeout) {
                    promise.fail(StreamFailed(description: "no answer within \(timeout)", timedOut: true))
                    stream.close(promise: nil)
                }
                promise.futureResult.whenComplete { _ in timer.cancel() }
            }
        }
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
        var multiplexer: NIOHTTP2Handler.StreamMultiplexer?
    }

    /// How long streams under way may still answer after GOAWAY.
    static let goAwayGrace: TimeAmount = .seconds(10)

    let firstSettings: EventLoopPromise<Void>
    private let state = Mutex(State())

    /// The connection's stream multiplexer, set when the pipeline is made.
    var multiplexer: NIOHTTP2Handler.StreamMultiplexer? {
        get { state.withLock { $0.multiplexer } }
        set { state.withLock { $0.multiplexer = newValue } }
    }

    init(loop: any EventLoop) {
        firstSettings = loop.makePromise()
    }

    var wentAway: Bool { state.withLock { $0.wentAway } }

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
            state.withLock { $0.wentAway = true }
            context.eventLoop.scheduleTask(in: Self.goAwayGrace) { [channel = context.channel] in
                channel.close(promise: nil)
            }
        default:
            break
        }
        context.fireChannelRead(data)
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

/// Collects one stream's answer (its HEADERS and DATA frames) into a promise; a stream that ends without one fails
/// it.
private final class ResponseCollector: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload

    /// Error bodies are a small JSON object; anything larger is not APNs.
    static let maximumBody = 64 * 1024

    private let promise: EventLoopPromise<APNsConnection.Response>
    private var response: APNsConnection.Response?

    init(promise: EventLoopPromise<APNsConnection.Response>) {
        self.promise = promise
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let endStream: Bool
        switch unwrapInboundIn(data) {
        case .headers(let headers):
            endStream = headers.endStream
            // An informational (1xx) head precedes the answer; trailers follow it.
            if response == nil, let status = headers.headers.first(name: ":status").flatMap({ Int($0) }),
                status >= 200
            {
                response = APNsConnection.Response(
                    status: status, apnsID: headers.headers.first(name: "apns-id"), body: [])
            }
        case .data(let data):
            endStream = data.endStream
            guard case .byteBuffer(let buffer) = data.data, var current = response,
                current.body.count + buffer.readableBytes <= Self.maximumBody
            else {
                promise.fail(APNsConnection.StreamFailed(description: "an answer body over 64 KiB, or before the head"))
                context.close(promise: nil)
                return
            }
            current.body.append(contentsOf: buffer.readableBytesView)
            response = current
        default:
            return
        }
        guard endStream else { return }
        // The stream is closed on both sides now, and swift-nio-http2 closes its channel. Closing it here as well
        // sent RST_STREAM(CANCEL) for streams not yet marked closed, and nghttpd (like any server that limits
        // resets, since CVE-2023-44487) ended the connection with GOAWAY after about a thousand of them: a
        // reconnection, and a second's backoff for the pushes under way, every 1,024 pushes.
        if let response {
            promise.succeed(response)
        } else {
            promise.fail(APNsConnection.StreamFailed(description: "a stream ended without an answer"))
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        promise.fail(APNsConnection.StreamFailed(description: "the stream closed without an answer"))
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        promise.fail(error)
        context.close(promise: nil)
    }
}
