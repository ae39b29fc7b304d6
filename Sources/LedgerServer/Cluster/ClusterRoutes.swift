import FCMWire
import Hummingbird
import LedgerCluster
import LedgerCore
import LedgerStore
import NIOPosix

/// `GET /v1/cluster`: the members, and each project's leader and replicas' progress (``ClusterStatus``).
///
/// An admin or auditor key sees the projects it is a key of, and no other (which projects exist is never
/// revealed); the nodes are everyone's. A server that is not part of a cluster answers 404.
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
            let projects = Set(grants.map(\.project)).intersection(cluster.projects)
            let status: ClusterStatus
            do {
                status = try await cluster.status(of: projects)
            } catch {
                throw FCMError.unavailable("etcd did not answer: the cluster's status cannot be read; retry.")
            }
            return try JSONResponse.encoded(status)
        }
        // A consistent copy of a project's ledger, for a peer that must be seeded (docs/cluster.md): a peer
        // secret (cluster.peerKeys) as bearer, and only from a node that holds the project.
        router.get("/internal/v1/projects/:project/snapshot") { request, context in
            guard let cluster = server.ledgers.cluster else {
                throw FCMError.notFound("This server is not part of a cluster.")
            }
            guard let secret = request.bearerSecret,
                CredentialStore.matches(secret, anyOf: cluster.configuration.peerKeys)
            else {
                throw FCMError.unauthenticated("A peer secret of cluster.peerKeys is required.")
            }
            let project = try context.parameters.project()
            guard server.configuration.credentials.projects.contains(project), cluster.holds(project) else {
                throw FCMError.notFound("This node holds no copy of project \(project).")
            }
            let path: String
            do {
                path = try await server.ledgers.snapshot(of: project)
            } catch let error as StoreError {
                throw FCMError.unavailable(
                    "A copy of project \(project) cannot be made: \(LedgerRegistry.reason(error)).")
            }
            let file = try await FileIO(threadPool: .singleton).loadFile(path: path, context: context)
            // The copy goes once it has been sent (or the sending failed); a response never written leaves it to
            // the sweep of copies over an hour old (``LedgerRegistry/snapshot(of:)``).
            let body = ResponseBody(contentLength: file.contentLength) { writer in
                defer { server.ledgers.removeSnapshot(at: path) }
                try await file.write(writer)
            }
            return Response(status: .ok, headers: [.contentType: "application/octet-stream"], body: body)
        }
    }
}
