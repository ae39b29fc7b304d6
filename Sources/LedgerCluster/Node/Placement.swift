import Crypto
import LedgerCore

/// Which nodes hold a project: the `replicas` live members with the highest rendezvous score
/// (SHA-256 of node and project), so that a node joining takes only the projects it wins and one leaving
/// gives up only its own.
public enum Placement {
    /// The holders of `project` among `nodes`, best first.
    public static func holders(of project: ProjectID, among nodes: [String], replicas: Int) -> [String] {
        nodes.map { (node: $0, score: score(node: $0, project: project)) }
            .sorted { $0.score != $1.score ? $0.score > $1.score : $0.node < $1.node }
            .prefix(max(replicas, 0))
            .map(\.node)
    }

    /// The node's score for the project: the first 8 bytes of SHA-256(node ‖ 0 ‖ project).
    static func score(node: String, project: ProjectID) -> UInt64 {
        var hasher = SHA256()
        hasher.update(data: Array(node.utf8) + [0] + Array(project.rawValue.utf8))
        return hasher.finalize().withUnsafeBytes { bytes in
            bytes.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        }
    }
}
