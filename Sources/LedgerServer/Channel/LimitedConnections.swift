import HummingbirdCore
import Logging
import NIOCore
import NIOSSL

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
