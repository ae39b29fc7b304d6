import NIOCore
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
