import FCMWire
import Hummingbird
import LedgerCluster
import LedgerCore

/// `GET /v1/cluster`: the members, and each project's leader and replicas' progress (``ClusterStatus``).
///
/// Any project's admin key sees every project; an auditor key sees its own project only. A server that is
/// not part of a cluster answers 404.
enum ClusterRoutes {
    static func register(on router: TokenPathRouter, server: ServerContext) {
        router.get("/v1/cluster") { request, _ in
            guard let secret = request.bearerSecret else {
                throw FCMError.unauthenticated("Request is missing required authentication credential: a Bearer token.")
            }
            let grants = server.configuration.credentials.grants(for: secret).filter { $0.role != .client }
            guard !grants.isEmpty else { throw FCMError.unauthenticated("The credential given is not valid.") }
            guard let cluster = server.ledgers.cluster else {
                throw FCMError.notFound("This server is not part of a cluster.")
            }
            let projects: Set<ProjectID> =
                grants.contains { $0.role == .admin } ? cluster.projects : Set(grants.map(\.project))
            let status: ClusterStatus
            do {
                status = try await cluster.status(of: projects)
            } catch {
                throw FCMError.unavailable("etcd did not answer: the cluster's status cannot be read; retry.")
            }
            return try JSONResponse.encoded(status)
        }
    }
}
