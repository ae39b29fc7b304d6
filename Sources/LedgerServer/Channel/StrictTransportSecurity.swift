import HTTPTypes
import NIOCore
import NIOHTTPTypes

/// Adds `Strict-Transport-Security` to every response head of a server that speaks HTTPS: a browser that has
/// seen it once (an auditor on the console) never again talks to this host over plain HTTP. Every answer gets
/// it — a page, an error, a 404 from the router — because the handler sits in each connection's (or HTTP/2
/// stream's) pipeline, below every route.
///
/// - Note: One handler per connection or stream, on its event loop.
final class StrictTransportSecurity: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    /// A year, the value HSTS preload lists ask for; no `includeSubDomains`: other hosts under the same domain
    /// are not this server's to speak for.
    static let value = "max-age=31536000"

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard case .head(var head) = unwrapOutboundIn(data) else {
            context.write(data, promise: promise)
            return
        }
        head.headerFields[.strictTransportSecurity] = Self.value
        context.write(wrapOutboundOut(.head(head)), promise: promise)
    }
}
