import HummingbirdCore
import HummingbirdHTTP2
import Logging
import NIOCore

extension HTTPServerBuilder {
    /// The HTTP server of `ledger serve` and `ledger witness`, each connection held to `limits`: HTTP/1.1 on plain
    /// TCP, or — with `certificate` — HTTPS with HTTP/2 negotiated by ALPN beside HTTP/1.1, every answer carrying
    /// `Strict-Transport-Security`.
    ///
    /// Every connection is counted by `limiter` before TLS or HTTP (``LimitedConnections``); a connection that has
    /// not sent a whole request head within the idle timeout is closed (Hummingbird's idle timeout counts from the
    /// last whole request part, so a head sent a byte at a time does not hold it open), as is one whose TLS handshake
    /// is not done by then; every request (an HTTP/1.1 request or an HTTP/2 stream) has its body's deadline
    /// (``RequestBodyDeadline``).
    ///
    /// - Parameters:
    ///   - limits: The timeouts and caps; `limiter` must have been made with the same.
    ///   - limiter: Counts the connections, and serves their series in the server's `/metrics`.
    ///   - certificate: The certificate to speak HTTPS with; `nil`: plain HTTP.
    ///   - logger: Where a connection closed for a slow body is told of (at debug).
    static func limited(
        _ limits: ConnectionLimits, limiter: ConnectionLimiter, certificate: ServerCertificate?, logger: Logger
    ) -> HTTPServerBuilder {
        let bodyTimeout = TimeAmount.seconds(Int64(limits.requestBodyTimeoutSeconds))
        let bodyLimits = RequestBodyDeadline.Limits(
            grace: min(.seconds(10), bodyTimeout), maximum: bodyTimeout,
            minimumBytesPerSecond: limits.minimumBodyBytesPerSecond)
        let idleTimeout = Duration.seconds(limits.idleTimeoutSeconds)
        guard let certificate else {
            let http1 = HTTP1Channel.Configuration(
                additionalChannelHandlers: [RequestBodyDeadline(limits: bodyLimits, logger: logger)],
                idleTimeout: TimeAmount(idleTimeout))
            return HTTPServerBuilder { responder in
                LimitedConnections(inner: HTTP1Channel(responder: responder, configuration: http1), limiter: limiter)
            }
        }
        let stream = HTTP1Channel.Configuration(
            additionalChannelHandlers: [
                RequestBodyDeadline(limits: bodyLimits, logger: logger), StrictTransportSecurity(),
            ],
            idleTimeout: TimeAmount(idleTimeout))
        let http2 = HTTP2UpgradeChannel.Configuration(idleTimeout: idleTimeout, streamConfiguration: stream)
        return HTTPServerBuilder { responder in
            LimitedConnections(
                inner: try HTTP2UpgradeChannel(
                    tlsConfiguration: certificate.tlsConfiguration, configuration: http2, responder: responder),
                limiter: limiter, tlsHandshakeTimeout: TimeAmount(idleTimeout))
        }
    }
}
