import FCMWire
import Foundation
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
        // The activity this replica saw of some devices, for the leader's expiry sweep (``PeerActivity``): what it
        // noted since its last sweep is written first, so that nothing it served is missed.
        router.post("/internal/v1/projects/:project/activity") { request, context in
            let project = try holderForPeer(request, context: context, server: server)
            let query: PeerActivity.Query
            do {
                let body = try await request.body.collect(upTo: PeerActivity.maximumBodyBytes)
                query = try JSONDecoder().decode(PeerActivity.Query.self, from: Data(body.readableBytesView))
            } catch {
                throw FCMError.invalidArgument(
                    "The body must be {\"devices\": [device numbers]}, at most \(PeerActivity.maximumDevices) of them.")
            }
            guard query.devices.count <= PeerActivity.maximumDevices else {
                throw FCMError.invalidArgument(
                    "At most \(PeerActivity.maximumDevices) devices may be asked about at once.")
            }
            let known: [(device: InstanceID, lastActive: Int64)]
            do {
                let ledger = try await server.ledgers.ledger(for: project)
                try await server.ledgers.recordActivity(of: project, in: ledger)
                known = try await server.ledgers.onWorker { try ledger.lastActivity(ofDevices: query.devices) }
            } catch let error as StoreError {
                throw FCMError.unavailable(
                    "The activity of project \(project) cannot be read: \(LedgerRegistry.reason(error)).")
            }
            return try JSONResponse.encoded(
                PeerActivity.Answer(lastActive: known.map { .init(device: $0.device, lastActive: $0.lastActive) }))
        }
        // The leader's checkpoint, for this replica to check against its own copy and cosign (``ReplicaCosigning``).
        router.post("/internal/v1/projects/:project/add-checkpoint") { request, context in
            let project = try holderForPeer(request, context: context, server: server)
            let body: ByteBuffer
            do {
                body = try await request.body.collect(upTo: maximumAddCheckpointBytes)
            } catch {
                throw FCMError.invalidArgument("The body is larger than \(maximumAddCheckpointBytes) bytes.")
            }
            return try await ReplicaCosigning.answer(body, project: project, server: server)
        }
        // A consistent copy of a project's ledger, for a peer that must be seeded (docs/cluster.md): a peer
        // secret (cluster.peerKeys) as bearer, and only from a node that holds the project.
        router.get("/internal/v1/projects/:project/snapshot") { request, context in
            let project = try holderForPeer(request, context: context, server: server)
            let path: String
            do {
                path = try await server.ledgers.opened.snapshot(of: project)
            } catch let error as StoreError {
                throw FCMError.unavailable(
                    "A copy of project \(project) cannot be made: \(LedgerRegistry.reason(error)).")
            }
            let file = try await FileIO(threadPool: .singleton).loadFile(path: path, context: context)
            // The copy goes once it has been sent (or the sending failed); a response never written leaves it to
            // the sweep of copies over an hour old (``OpenLedgers/snapshot(of:)``).
            let body = ResponseBody(contentLength: file.contentLength) { writer in
                defer { server.ledgers.opened.removeSnapshot(at: path) }
                try await file.write(writer)
            }
            return Response(status: .ok, headers: [.contentType: "application/octet-stream"], body: body)
        }
    }

    /// The project of an internal route's path, when a peer asks (a secret of cluster.peerKeys as bearer) and
    /// this node holds a copy of it.
    private static func holderForPeer(_ request: Request, context: LedgerRequestContext, server: ServerContext)
        throws -> ProjectID
    {
        guard let cluster = server.ledgers.cluster else {
            throw FCMError.notFound("This server is not part of a cluster.")
        }
        guard let secret = request.bearerSecret, CredentialStore.matches(secret, anyOf: cluster.configuration.peerKeys)
        else {
            throw FCMError.unauthenticated("A peer secret of cluster.peerKeys is required.")
        }
        let project = try context.parameters.project()
        guard server.configuration.credentials.projects.contains(project), cluster.holds(project) else {
            throw FCMError.notFound("This node holds no copy of project \(project).")
        }
        return project
    }
}
