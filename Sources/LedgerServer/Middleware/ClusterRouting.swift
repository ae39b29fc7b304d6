import FCMWire
import Hummingbird
import LedgerCore

/// The first of a project route's three middlewares (routing, then authentication, then read-your-writes): in a
/// cluster, sends the request to the node that serves its project when that is not this one — before anything
/// else is decided about it, so the node that serves it is the one that authenticates it, once.
///
/// The project is the path's (`/v1/projects/{project}/…`) or, on the Instance ID routes, whose paths name none,
/// the one the bearer credential belongs to. A request whose project this server does not serve, or whose
/// credential names none, goes on here: authentication refuses it in its route's shape.
struct ClusterRouting: RouterMiddleware {
    typealias Context = LedgerRequestContext
    enum ProjectSource { case path, bearerCredential }

    let server: ServerContext
    let project: ProjectSource

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        guard server.ledgers.cluster != nil, let project = projectServed(by: request, context: context) else {
            return try await next(request, context)
        }
        // The Instance ID routes answer their 4xx in their own shape, a refusal of the forwarding included (a body
        // over the limit).
        let answer = try await InstanceIDError.inShape(if: self.project == .bearerCredential) {
            try await server.answerElsewhere(request, project: project)
        }
        if let answer { return answer }
        return try await next(request, context)
    }

    private func projectServed(by request: Request, context: Context) -> ProjectID? {
        let credentials = server.configuration.credentials
        switch project {
        case .path:
            guard let project = try? context.parameters.project(), credentials.projects.contains(project) else {
                return nil
            }
            return project
        case .bearerCredential:
            guard let secret = request.bearerSecret else { return nil }
            let projects = Set(credentials.grants(for: secret).map(\.project))
            return projects.count == 1 ? projects.first : nil
        }
    }
}

extension RouterGroup where Context == LedgerRequestContext {
    /// A project route's middlewares, in their order: ``ClusterRouting`` (by the path's project), then
    /// ``ProjectAuthentication`` for `roles`, then ``ReadYourWrites``.
    func projectRoutes(_ server: ServerContext, roles: Set<CredentialStore.Role>) -> RouterGroup<Context> {
        add(middleware: ClusterRouting(server: server, project: .path))
            .add(middleware: ProjectAuthentication(server: server, roles: roles))
            .add(middleware: ReadYourWrites(server: server))
    }

    /// The Instance ID routes' middlewares, in their order: ``ClusterRouting`` (by the credential's project), then
    /// ``InstanceIDAuthentication`` for `roles`, then ``ReadYourWrites`` (4xx in the Instance ID shape).
    func instanceIDRoutes(_ server: ServerContext, roles: Set<CredentialStore.Role>) -> RouterGroup<Context> {
        add(middleware: ClusterRouting(server: server, project: .bearerCredential))
            .add(middleware: InstanceIDAuthentication(server: server, roles: roles))
            .add(middleware: ReadYourWrites(server: server, instanceIDShape: true))
    }
}

extension InstanceIDError {
    /// Runs `body`, answering its Google-shaped 4xx refusals in the Instance ID shape (`{"error": "STATUS"}`) when
    /// `instanceID`; 5xx stay in the Google shape, as on every Instance ID route (docs/openapi.yaml).
    static func inShape<T>(if instanceID: Bool, _ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as FCMError where instanceID && error.status.kind == .clientError {
            throw InstanceIDError(status: error.status, code: error.googleStatus)
        }
    }
}
