import AsyncHTTPClient
import FCMWire
import Foundation
import Hummingbird
import LedgerCluster
import LedgerCore
import LedgerQueries
import LedgerStore
import Logging
import NIOCore
import NIOHTTP1

/// A cluster cosigns itself (docs/cluster.md, "The replicas cosign"): the leader submits each checkpoint it
/// signs to every other replica, in C2SP tlog-witness's `add-checkpoint` format
/// (`POST /internal/v1/projects/{p}/add-checkpoint`, a peer secret as bearer). A replica holds the whole log, so
/// it checks more than a witness can: it waits until it has applied the checkpoint's size, computes the root of
/// its own copy at that size, and cosigns (C2SP tlog-cosignature, with its node's key) only when the roots are
/// equal. A checkpoint carrying every replica's cosignature proves the copies hold the same log up to its size.
/// Each replica reports the size it cosigned to etcd; `GET /v1/cluster` shows it, with the replica's vkey.
enum ReplicaCosigning {
    static func path(_ project: ProjectID) -> String { "/internal/v1/projects/\(project.rawValue)/add-checkpoint" }

    /// The name a node's cosignatures carry.
    static func name(ofNode node: String) -> String { "topicledger-node/\(node)" }

    /// How long a replica waits to have applied a checkpoint's size, and the leader waits for its answer.
    static let wait = Duration.seconds(5)

    /// A replica's answer to its leader's checkpoint: 200 with its cosignature line when its own copy has the
    /// checkpoint's root at its size; 400 (malformed, an old size above the size), 404 (another origin), 403
    /// (not signed by the project's key), 409 (its copy has another root: logged, a fork), 503 (not applied yet).
    static func answer(_ body: ByteBuffer, project: ProjectID, server: ServerContext) async throws -> Response {
        let request: AddCheckpointRequest
        do {
            request = try AddCheckpointRequest(parsing: String(decoding: body.readableBytesView, as: UTF8.self))
        } catch {
            return text(.badRequest, "\(error)\n")
        }
        let ledgers = server.ledgers
        guard let cluster = ledgers.cluster else { throw FCMError.notFound("This server is not part of a cluster.") }
        let keeper: CheckpointKeeper
        do {
            keeper = try await ledgers.signers.signer(for: project).keeper
        } catch {
            throw FCMError.unavailable("Project \(project) cannot check checkpoints: its signing key cannot be used.")
        }
        let checkpoint = request.note.checkpoint
        guard checkpoint.origin == keeper.origin else { return text(.notFound, "not this project's origin\n") }
        guard (try? keeper.signer.verifier.verify(note: request.note.text)) != nil else {
            return text(.forbidden, "not signed by the project's checkpoint key\n")
        }
        guard request.oldSize <= checkpoint.size else { return text(.badRequest, "the old size is above the size\n") }
        let ledger = try await server.ledger(for: project)
        guard await ledger.waitForHead(checkpoint.size, upTo: wait) else {
            return text(.serviceUnavailable, "this replica has not applied size \(checkpoint.size) yet\n")
        }
        let root = try await ledgers.onWorker { try ledger.read { try $0.merkleTree(size: checkpoint.size).root() } }
        guard root == checkpoint.root else {
            ledgers.logger.error(
                "the leader's checkpoint has another root than this replica's copy at its size: the copies differ",
                metadata: ["ledger.project": "\(project)", "ledger.size": "\(checkpoint.size)"])
            return text(.conflict, "this replica's copy has another root at size \(checkpoint.size)\n")
        }
        let cosigner = try await ledgers.cosignatures.cosigner(name: name(ofNode: cluster.nodeID))
        let line = try cosigner.cosign(request.note, time: UInt64(max(0, Date().timeIntervalSince1970)))
        try? await cluster.reportCosigned(project, size: checkpoint.size, vkey: cosigner.verifier.vkey)
        return text(.ok, line + "\n")
    }

    /// The cosignature lines of the replicas of `project` on `note` (parsed once, by the caller): this node's (the
    /// leader's: its copy is the one it signed), and each other replica's that answers within ``wait`` with a line
    /// that verifies with the vkey it reported. A replica that does not is left out (the checkpoint is served all
    /// the same; `/v1/cluster` shows what each cosigned).
    ///
    /// One etcd read a round. Whom to ask needs none: the project's other holders by placement over the live
    /// members, which this node follows by a watch (``ClusterNode/peerReplicas(of:)``). The vkeys are read once,
    /// after the answers (``ClusterNode/reportedCosignatures(of:)``, a range of the project's `cosigned/` keys): a
    /// replica reports its vkey before it answers, so the key of one cosigning its first checkpoint is there.
    static func collect(_ note: SignedNote, project: ProjectID, server: ServerContext) async -> [String] {
        let ledgers = server.ledgers
        guard let cluster = ledgers.cluster,
            let cosigner = try? await ledgers.cosignatures.cosigner(name: name(ofNode: cluster.nodeID)),
            let own = try? cosigner.cosign(note, time: UInt64(max(0, Date().timeIntervalSince1970)))
        else { return [] }
        try? await cluster.reportCosigned(project, size: note.checkpoint.size, vkey: cosigner.verifier.vkey)
        guard let secret = cluster.configuration.peerSecret else { return [own] }
        let answers = await withTaskGroup(of: (node: String, line: String)?.self) { group in
            for peer in cluster.peerReplicas(of: project) {
                group.addTask {
                    await ask(peer.url + path(project), secret: secret, note: note, node: peer.node).map {
                        (peer.node, $0)
                    }
                }
            }
            var answers: [(node: String, line: String)] = []
            for await answer in group { if let answer { answers.append(answer) } }
            return answers
        }
        guard !answers.isEmpty, let reported = try? await cluster.reportedCosignatures(of: project) else {
            return [own]
        }
        // Each line counts when it verifies with the vkey its replica reported.
        let valid = answers.filter { answer in
            guard let key = reported[answer.node].flatMap({ CosignatureVerifier(vkey: $0.vkey) }) else { return false }
            return key.cosignedTime(of: note.adding([answer.line])) != nil
        }
        return [own] + valid.map(\.line).sorted()
    }

    private static func ask(_ url: String, secret: String, note: SignedNote, node: String) async -> String? {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Authorization", value: "Bearer \(secret)")
        request.headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
        request.body = .bytes(ByteBuffer(string: AddCheckpointRequest(oldSize: 0, proof: [], note: note).text))
        guard let response = try? await ClusterForwarder.client.execute(request, timeout: .seconds(6)),
            response.status == .ok, let body = try? await response.body.collect(upTo: 4096)
        else { return nil }
        return String(decoding: body.readableBytesView, as: UTF8.self).split(separator: "\n").first.map(String.init)
    }

    private static func text(_ status: HTTPResponse.Status, _ text: String) -> Response {
        Response(
            status: status, headers: [.contentType: "text/plain; charset=utf-8"],
            body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }
}
