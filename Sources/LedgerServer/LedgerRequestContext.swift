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

/// Authenticates the caller of a `/v1/projects/{project}/…` route for that project with one of `roles`
/// (401 without a valid credential, 403 for another project's or a role that may not call the route).
/// Then opens the project's ledger (503 UNAVAILABLE when it cannot be served). The second of a project
/// route's middlewares (``RouterGroup/projectRoutes(_:roles:)``): a request another node serves has been sent
/// there already (``ClusterRouting``).
struct ProjectAuthentication: RouterMiddleware {
    typealias Context = LedgerRequestContext
    let server: ServerContext
    let roles: Set<CredentialStore.Role>

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        var context = context
        let project = try context.parameters.project()
        let caller = try server.configuration.credentials.authorize(request, project: project, roles: roles)
        context.caller = caller
        context.ledger = try await server.ledger(for: caller.project)
        return try await next(request, context)
    }
}

/// Authenticates an admin bearer on the Instance ID routes, whose paths name no project: the credential
/// does (errors in the Instance ID shape). Then opens that project's ledger. The second of their middlewares
/// (``RouterGroup/instanceIDRoutes(_:roles:)``).
struct InstanceIDAuthentication: RouterMiddleware {
    typealias Context = LedgerRequestContext
    let server: ServerContext
    var roles: Set<CredentialStore.Role> = [.admin]

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        var context = context
        let caller = try server.configuration.credentials.authorizeBearer(request, roles: roles)
        context.caller = caller
        context.ledger = try await server.ledger(for: caller.project)
        return try await next(request, context)
    }
}

/// Reads the registration token of the path (`{token}`, percent-decoded) once the caller is known:
/// 400 INVALID_ARGUMENT naming "registration token" when it is malformed.
struct RegistrationInPath: RouterMiddleware {
    typealias Context = LedgerRequestContext
    /// Where a device's own requests are noted as its activity (registration expiry); `nil` notes nothing.
    var activity: ActivityTracker?

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        var context = context
        do {
            context.registrationToken = try RegistrationToken(
                try context.parameters.decoded("token"), field: "registration token")
        } catch let error as LedgerCoreError {
            throw FCMError.invalidArgument(error)
        }
        if let activity, let caller = context.caller, caller.role == .client, let token = context.registrationToken {
            activity.note(token, in: caller.project)
        }
        return try await next(request, context)
    }
}
