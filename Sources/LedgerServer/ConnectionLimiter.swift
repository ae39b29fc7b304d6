import HummingbirdCore
import Logging
import NIOCore
import NIOSSL
import NIOTLS
import Synchronization

/// Caps the connections a server holds open at once: a connection beyond the cap is closed as soon as it is
/// accepted, so a flood of idle or slow connections (a slowloris) cannot take every file descriptor and stop
/// `/healthz` — together with the idle timeout (``ServerConfiguration/idleTimeoutSeconds``), which closes a
/// connection that has not sent a whole request head in time.
///
/// - Note: Thread-safe; one instance is shared by every connection of a server.
final class ConnectionLimiter: Sendable {
    let maximum: Int
    private let open = Atomic<Int>(0)

    init(maximum: Int) { self.maximum = maximum }

    /// The connections open now.
    var current: Int { open.load(ordering: .relaxed) }

    /// A handler for one connection's pipeline.
    func handler() -> Handler { Handler(limiter: self) }

    final class Handler: ChannelInboundHandler, RemovableChannelHandler {
        // Parts pass through untouched; the handler only watches the connection open and close.
        typealias InboundIn = NIOAny
        private let limiter: ConnectionLimiter
        private var counted = false

        init(limiter: ConnectionLimiter) { self.limiter = limiter }

        func handlerAdded(context: ChannelHandlerContext) {
            if context.channel.isActive { admit(context) }
        }

        func channelActive(context: ChannelHandlerContext) {
            admit(context)
            context.fireChannelActive()
        }

        func channelInactive(context: ChannelHandlerContext) {
            release()
            context.fireChannelInactive()
        }

        func handlerRemoved(context: ChannelHandlerContext) { release() }

        private func admit(_ context: ChannelHandlerContext) {
            guard !counted else { return }
            counted = true
            if limiter.open.wrappingAdd(1, ordering: .relaxed).newValue > limiter.maximum {
                context.close(promise: nil)
            }
        }

        private func release() {
            guard counted else { return }
            counted = false
            limiter.open.wrappingSubtract(1, ordering: .relaxed)
        }
    }
}

/// A server's connections under a ``ConnectionLimiter``: its handler goes first in every accepted
/// connection's pipeline, before TLS and HTTP, so the cap counts connections (not HTTP/2 streams) whatever
/// protocol `inner` then speaks. With `tlsHandshakeTimeout`, a connection whose TLS handshake is not done in
/// that time is closed (``TLSHandshakeDeadline``): HTTP's idle timeout starts only once TLS is up.
struct LimitedConnections<Inner: ServerChildChannel>: ServerChildChannel {
    typealias Value = Inner.Value
    let inner: Inner
    let limiter: ConnectionLimiter
    var tlsHandshakeTimeout: TimeAmount?

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        do {
            try channel.pipeline.syncOperations.addHandler(limiter.handler())
        } catch {
            return channel.eventLoop.makeFailedFuture(error)
        }
        let configured = inner.setup(channel: channel, logger: logger)
        guard let tlsHandshakeTimeout else { return configured }
        return configured.flatMapThrowing { value in
            // Right after TLS, where its handshake-completed event passes on its way to ALPN.
            let tls = try channel.pipeline.syncOperations.context(handlerType: NIOSSLServerHandler.self)
            try channel.pipeline.syncOperations.addHandler(
                TLSHandshakeDeadline(timeout: tlsHandshakeTimeout), position: .after(tls.handler))
            return value
        }
    }

    func handle(value: Value, logger: Logger) async {
        await inner.handle(value: value, logger: logger)
    }
}

/// Closes a connection whose TLS handshake has not completed within `timeout` of its arrival: a client that
/// connects and sends nothing, or half a ClientHello, would otherwise hold its connection — and, with enough of
/// them, every connection the cap allows — for good, since HTTP's idle timeout starts only after the handshake.
/// Removes itself once the handshake is done.
///
/// - Note: One handler per connection, on its event loop.
final class TLSHandshakeDeadline: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    private let timeout: TimeAmount
    private var deadline: Scheduled<Void>?

    init(timeout: TimeAmount) { self.timeout = timeout }

    func handlerAdded(context: ChannelHandlerContext) {
        deadline = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) {
            context.close(promise: nil)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        deadline?.cancel()
        deadline = nil
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted = event as? TLSUserEvent {
            deadline?.cancel()
            deadline = nil
            context.fireUserInboundEventTriggered(event)
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }
}
