import FCMWire
import Hummingbird
import LedgerCluster
import LedgerCore
import LedgerStore

extension ServerContext {
    /// The answer of the node that serves this request, when it is not this one (a write to a project
    /// another node leads, a read of a project this node does not hold); `nil` when it is served here.
    ///
    /// A request another node forwarded here is served here (or refused by its ledger's gate), never
    /// forwarded again. A client's `x-ledger-forwarded-by`, without a peer's secret, is ignored: it would
    /// otherwise be served from whatever this node holds (nothing, a fork, a stalled copy).
    ///
    /// - Throws: 503 UNAVAILABLE when no node can serve it now (no leader elected yet).
    func answerElsewhere(_ request: Request, project: ProjectID) async throws -> Response? {
        guard let cluster = ledgers.cluster, let forwarder else { return nil }
        if request.isForwardedByPeer(cluster.configuration.peerKeys) { return nil }
        let needsLeader = request.needsLeader
        switch cluster.route(project, isWrite: needsLeader) {
        case .local:
            return nil
        case .forward(let url):
            return try await forwarder.forward(request, to: url) {
                cluster.route(project, isWrite: needsLeader) == .forward(url: url)
            }
        case .unavailable(let reason):
            var error = FCMError.unavailable("Project \(project) cannot be served right now: \(reason); retry.")
            error.headers[.retryAfter] = "1"
            throw error
        }
    }

    /// Waits until `ledger` holds the seq the request names in `x-ledger-min-seq` (at most five seconds).
    ///
    /// - Throws: 400 INVALID_ARGUMENT when the header is not a seq; 503 UNAVAILABLE when the replica does not
    ///   reach it in time.
    func awaitMinimumSeq(of request: Request, in ledger: Ledger) async throws {
        guard let text = request.headers[.ledgerMinSeq] else { return }
        guard let seq = UInt64(text) else {
            throw FCMError.invalidArgument("x-ledger-min-seq must be a seq (a whole number), not \(text.prefix(30))")
        }
        guard await ledger.waitForHead(seq, upTo: .seconds(5)) else {
            var error = FCMError.unavailable(
                "This node's replica has not reached seq \(seq) within 5 seconds; retry, or read from the leader.")
            error.headers[.retryAfter] = "1"
            throw error
        }
    }

    /// `response` with the seq acknowledged now (``HTTPField/Name/ledgerSeq``, ``Ledger/acknowledgedSeq``), for a write that
    /// succeeded in a cluster: a read that names it, on any node, sees the write. (A node of its own answers
    /// every read from the log it writes, and skips the read transaction.)
    func stampingSeq(_ response: Response, of ledger: Ledger, for request: Request) -> Response {
        guard ledgers.cluster != nil, request.isWrite, response.status.kind == .successful else { return response }
        let seq = ledger.acknowledgedSeq
        var response = response
        response.headers[.ledgerSeq] = String(seq)
        return response
    }
}

extension Request {
    /// Whether a peer forwarded the request: it names the forwarding node and carries a secret whose SHA-256 is
    /// one of `peerKeys` (compared in constant time).
    func isForwardedByPeer(_ peerKeys: [String]) -> Bool {
        guard headers[.ledgerForwardedBy] != nil, let secret = headers[.ledgerPeer] else { return false }
        return CredentialStore.matches(secret, anyOf: peerKeys)
    }

    /// Whether the request may change the ledger (every method but GET and HEAD).
    var isWrite: Bool { method != .get && method != .head }

    /// Whether only the project's leader serves it: a write, or a checkpoint or proof (checkpoints are signed,
    /// cosigned by the replicas and submitted to witnesses by the leader alone: a follower signing its own would
    /// race the leader's submissions to the same witnesses with older sizes).
    var needsLeader: Bool {
        isWrite || uri.path.hasSuffix("/ledger:checkpoint") || uri.path.hasSuffix("/ledger:consistency")
            || (uri.path.hasSuffix(":proof") && uri.path.contains("/messages/"))
    }
}
