import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// Devices holding `messages:stream` open, as lean as a load generator can be: one NIO channel per device
/// on one event-loop thread, the HTTP decoder and a handler that records when each message id arrives —
/// no task per stream, no `String` per body part. The measurement is the server's delivery latency, so
/// the devices' own cost must stay small beside it (AsyncHTTPClient's streamed bodies cost about 60 µs of
/// CPU per received message on this machine, more than the server's work per device).
final class StreamingDevices: Sendable {
    let receipts = Receipts()
    private let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)

    /// Opens one stream per token, one after another; returns when all have answered 200.
    func open(tokens: [String], host: String, port: Int, project: String, apiKey: String) async throws {
        for token in tokens {
            let request = HTTPRequestHead(
                version: .http1_1, method: .GET,
                uri: "/v1/projects/\(project)/registrations/\(token)/messages:stream",
                headers: [
                    "Host": "\(host):\(port)", "x-goog-api-key": apiKey, "Accept": "text/event-stream",
                ])
            let receipts = receipts
            _ = try await ClientBootstrap(group: group)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHTTPClientHandlers()
                        try channel.pipeline.syncOperations.addHandler(
                            SSEReceiver(request: request, receipts: receipts))
                    }
                }
                .connect(host: host, port: port).get()
        }
        try await receipts.waitForConnections(tokens.count, timeout: .seconds(120))
    }

    func close() async {
        try? await group.shutdownGracefully()
    }
}

/// One device's stream: sends the request when connected, then splits the body into Server-Sent Events
/// and records the arrival of each `"messageId":"…"`.
private final class SSEReceiver: ChannelInboundHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart

    private static let separator = Array("\n\n".utf8)
    private static let idKey = Array(#""messageId":""#.utf8)
    private let request: HTTPRequestHead
    private let receipts: Receipts
    private var pending: [UInt8] = []

    init(request: HTTPRequestHead, receipts: Receipts) {
        self.request = request
        self.receipts = receipts
    }

    func channelActive(context: ChannelHandlerContext) {
        context.write(wrapOutboundOut(.head(request)), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            if head.status == .ok { receipts.connected() }
        case .body(let buffer):
            let now = ContinuousClock.now
            pending.append(contentsOf: buffer.readableBytesView)
            let consumed = pending.withUnsafeBytes { bytes -> Int in
                var start = 0
                while let end = Self.find(Self.separator, in: bytes, from: start, to: bytes.count) {
                    if let key = Self.find(Self.idKey, in: bytes, from: start, to: end) {
                        let digits = bytes[(key + Self.idKey.count)..<end].prefix { $0 >= 0x30 && $0 <= 0x39 }
                        receipts.arrived(String(decoding: digits, as: UTF8.self), at: now)
                    }
                    start = end + Self.separator.count
                }
                return start
            }
            pending.removeFirst(consumed)
        case .end:
            context.close(promise: nil)
        }
    }
}

extension SSEReceiver {
    /// Where `needle` first starts in `bytes[from..<to]` (a plain loop: the generic `firstRange(of:)`
    /// cost more CPU than the server's work per device).
    static func find(_ needle: [UInt8], in bytes: UnsafeRawBufferPointer, from: Int, to: Int) -> Int? {
        guard to - from >= needle.count else { return nil }
        var index = from
        while index <= to - needle.count {
            var matched = 0
            while matched < needle.count && bytes[index + matched] == needle[matched] { matched += 1 }
            if matched == needle.count { return index }
            index += 1
        }
        return nil
    }
}

/// Arrivals per message id, and how many streams are connected.
final class Receipts: @unchecked Sendable {
    // @unchecked: every field is only touched with `lock` held.
    private let lock = NSLock()
    private var arrivals: [String: [ContinuousClock.Instant]] = [:]
    private var connections = 0

    func connected() {
        lock.withLock { connections += 1 }
    }

    func arrived(_ id: String, at instant: ContinuousClock.Instant) {
        lock.withLock { arrivals[id, default: []].append(instant) }
    }

    func waitForConnections(_ count: Int, timeout: Duration) async throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if lock.withLock({ connections }) >= count { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw BenchError("only some of \(count) streams connected")
    }

    func waitForArrivals(of id: String, count: Int, timeout: Duration) async throws -> [ContinuousClock.Instant] {
        // Arrivals are timed when they are read, so how often this looks changes no measurement.
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if lock.withLock({ arrivals[id]?.count ?? 0 }) >= count { return lock.withLock { arrivals[id] ?? [] } }
            try await Task.sleep(for: .milliseconds(1))
        }
        throw BenchError("message \(id) reached only some of \(count) devices")
    }
}
