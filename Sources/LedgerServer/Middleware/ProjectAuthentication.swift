import Hummingbird
import LedgerStore
import LedgerCore
import NIOCore
import FCMWire

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
