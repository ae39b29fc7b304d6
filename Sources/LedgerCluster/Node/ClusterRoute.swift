/// Where a request for a project is served.
public enum ClusterRoute: Sendable, Equatable {
    /// Here: this node leads the project (a write), or holds a replica of it (a read).
    case local
    /// At the node advertised at `url` (the leader).
    case forward(url: String)
    /// Nowhere right now (no leader elected yet, or its node is not known to be alive): why.
    case unavailable(String)
}
