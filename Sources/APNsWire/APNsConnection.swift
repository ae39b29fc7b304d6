import Foundation
import NIOCore
import NIOHTTP1
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

    /// Connects to `host:port` and waits for the server's first SETTINGS (its stream limit), at most `timeout`
    /// in all.
    static func connect(host: String, port: Int, tls: NIOSSLContext, timeout: TimeAmount = .seconds(10))
        -> EventLoopFuture<APNsConnection>
    {
        let watcher = ConnectionWatcher()
        let bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(timeout)
            .channelOption(.socketOption(.so_keepalive), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    // SNI only for names: an IP address is not a server name (RFC 6066).
                    let serverName = host.first.map { $0.isLetter } == true ? host : nil
                    let handler = try NIOSSLClientHandler(context: tls, serverHostname: serverName)
                    try channel.pipeline.syncOperations.addHandler(handler)
                    let multiplexer = try channel.pipeline.syncOperations.configureHTTP2Pipeline(
                        mode: .client, connectionConfiguration: .init(), streamConfiguration: .init(),
                        inboundStreamInitializer: { channel in channel.close() })
                    try channel.pipeline.syncOperations.addHandler(watcher)
                    watcher.multiplexer = multiplexer
                }
            }
        return bootstrap.connect(host: host, port: port).flatMapError { error in
            watcher.fail(error)
            return MultiThreadedEventLoopGroup.singleton.next().makeFailedFuture(error)
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

    /// Sends one request on a new stream and returns the answer.
    ///
    /// - Throws: ``StreamFailed`` (or a NIO error) when no answer came: the push may or may not have arrived.
    func send(
        path: String, headers: [(String, String)], body: [UInt8], timeout: TimeAmount = .seconds(30)
    ) async throws -> Response {
        guard isUsable else { throw StreamFailed(description: "the connection is closed or going away") }
        let promise = channel.eventLoop.makePromise(of: Response.self)
        let stream: any Channel
        do {
            stream = try await multiplexer.createStreamChannel { stream in
                stream.eventLoop.makeCompletedFuture {
                    try stream.pipeline.syncOperations.addHandlers([
                        HTTP2FramePayloadToHTTP1ClientCodec(httpProtocol: .https), ResponseCollector(promise: promise),
                    ])
                }
            }.get()
        } catch {
            promise.fail(error)  // every promise is completed, or NIO reports it leaked
            throw error
        }
        var head = HTTPRequestHead(version: .http2, method: .POST, uri: path)
        head.headers.add(name: "host", value: host)
        for (name, value) in headers { head.headers.add(name: name, value: value) }
        head.headers.add(name: "content-length", value: String(body.count))
        stream.write(HTTPClientRequestPart.head(head), promise: nil)
        stream.write(HTTPClientRequestPart.body(.byteBuffer(ByteBuffer(bytes: body))), promise: nil)
        stream.writeAndFlush(HTTPClientRequestPart.end(nil)).whenFailure { promise.fail($0) }
        let timer = stream.eventLoop.scheduleTask(in: timeout) {
            promise.fail(StreamFailed(description: "no answer within \(timeout)", timedOut: true))
            stream.close(promise: nil)
        }
        defer { timer.cancel() }
        return try await promise.futureResult.get()
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

    init() {
        firstSettings = MultiThreadedEventLoopGroup.singleton.next().makePromise()
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

/// Collects one stream's answer (head and body) into a promise; a stream that ends without one fails it.
private final class ResponseCollector: ChannelInboundHandler {
    typealias InboundIn = HTTPClientResponsePart

    /// Error bodies are a small JSON object; anything larger is not APNs.
    static let maximumBody = 64 * 1024

    private let promise: EventLoopPromise<APNsConnection.Response>
    private var response: APNsConnection.Response?

    init(promise: EventLoopPromise<APNsConnection.Response>) {
        self.promise = promise
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            response = APNsConnection.Response(
                status: Int(head.status.code), apnsID: head.headers.first(name: "apns-id"), body: [])
        case .body(let buffer):
            guard var current = response, current.body.count + buffer.readableBytes <= Self.maximumBody else {
                promise.fail(APNsConnection.StreamFailed(description: "an answer body over 64 KiB"))
                context.close(promise: nil)
                return
            }
            current.body.append(contentsOf: buffer.readableBytesView)
            response = current
        case .end:
            if let response {
                promise.succeed(response)
            } else {
                promise.fail(APNsConnection.StreamFailed(description: "a stream ended without an answer"))
            }
            context.close(promise: nil)
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
