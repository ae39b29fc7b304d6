import Hummingbird
import LedgerStore
import LedgerCore
import NIOCore
import FCMWire

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
