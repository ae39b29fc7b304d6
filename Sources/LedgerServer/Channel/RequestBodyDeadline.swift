import HTTPTypes
import Logging
import NIOCore
import NIOHTTPTypes

/// Closes a connection whose request body does not arrive in time, so that a client that sends a request head
/// and then trickles its body (a slow-body slowloris, one byte every few seconds) cannot hold a connection —
/// and, with enough of them, every connection the server allows — with no credential at all.
///
/// The head is bounded by the idle timeout (``ConnectionLimits/idleTimeoutSeconds``: a connection that
/// has not sent a whole head in time is closed). From the head on, the body must be whole by
///
///     head + min(maximum, grace + received bytes ÷ minimum rate)
///
/// as Apache's mod_reqtimeout counts (`body=10-60,MinRate=…`): ``grace`` seconds for the first bytes, one
/// more second for each `minimumBytesPerSecond` bytes that arrive, never past ``maximum``. A body that keeps
/// the rate finishes long before the deadline; one byte every 15 s is closed after the grace. A request
/// without a body (a long poll, a stream) is whole at its head and is never cut: answering may take as long as
/// it takes.
///
/// - Note: One handler per connection, on its event loop (not `Sendable`).
final class RequestBodyDeadline: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart

    struct Limits: Sendable {
        /// How long the first bytes of a body may take.
        var grace: TimeAmount = .seconds(10)
        /// The most any body may take, whatever its rate.
        var maximum: TimeAmount
        /// Each this many bytes received allow one more second.
        var minimumBytesPerSecond: Int
    }

    private let limits: Limits
    private let logger: Logger
    /// When the head of the request whose body is being read arrived (`nil` between bodies).
    private var started: NIODeadline?
    private var received = 0
    private var check: Scheduled<Void>?

    init(limits: Limits, logger: Logger) {
        self.limits = limits
        self.logger = logger
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            started = .now()
            received = 0
            schedule(context)
        case .body(let buffer):
            received &+= buffer.readableBytes
        case .end:
            started = nil
            check?.cancel()
            check = nil
        }
        context.fireChannelRead(data)
    }

    func channelInactive(context: ChannelHandlerContext) {
        check?.cancel()
        check = nil
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        check?.cancel()
        check = nil
    }

    /// The moment the body being read must be whole by.
    private func deadline(from started: NIODeadline) -> NIODeadline {
        // In Double: `received` is the client's to choose; the result is capped at `maximum` before it is
        // turned back into nanoseconds.
        let earned = Double(received) / Double(max(limits.minimumBytesPerSecond, 1)) * 1e9
        let allowed = min(Double(limits.maximum.nanoseconds), Double(limits.grace.nanoseconds) + earned)
        return started + .nanoseconds(Int64(allowed))
    }

    private func schedule(_ context: ChannelHandlerContext) {
        check?.cancel()
        guard let started else { return }
        let at = deadline(from: started)
        check = context.eventLoop.assumeIsolated().scheduleTask(deadline: at) { [self] in
            check = nil
            guard let current = self.started, current == started else { return }
            if NIODeadline.now() >= deadline(from: started) {
                logger.debug(
                    "closing a connection whose request body is too slow",
                    metadata: ["ledger.bodyBytes": "\(received)"])
                context.close(promise: nil)
            } else {
                schedule(context)
            }
        }
    }
}
