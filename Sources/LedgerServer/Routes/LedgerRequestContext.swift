import Hummingbird
import LedgerStore
import LedgerCore
import NIOCore
import FCMWire

/// The request context of every route as it arrives. The authentication middlewares (``ProjectAuthentication``,
/// ``InstanceIDAuthentication``) fill in who is calling and the ledger of their project, and
/// ``RegistrationInPath`` the registration a `{token}` path names; the routes behind them run with a
/// ``ProjectRequestContext`` or a ``RegistrationRequestContext``, where those are not optional (Hummingbird's
/// `ChildRequestContext`).
public struct LedgerRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    var caller: Caller?
    var ledger: Ledger?
    var registrationToken: RegistrationToken?
    /// The connection, kept to read the peer's address only where a route needs it (the console's sign-in
    /// throttle), not on every request.
    private let channel: any Channel

    public init(source: Source) {
        coreContext = .init(source: source)
        channel = source.channel
    }

    /// The address of the peer (a proxy in front of the server is the peer: no forwarded header is trusted).
    var remoteAddress: SocketAddress? { channel.remoteAddress }
}

/// A route registered without the middleware its handler relies on (a bug, never a client's fault).
struct RouteSetupError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
