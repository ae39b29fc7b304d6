/// A node's id or advertise URL is held by another live process (``ClusterNode/join()``): two processes under
/// one id would take each other's membership, and two under one URL would receive each other's forwarded
/// requests.
public struct MembershipTaken: Error, Sendable, CustomStringConvertible {
    public let nodeID: String
    public let advertiseURL: String
    /// The URL the live holder of ``nodeID`` advertises, when one holds it.
    public let holderURL: String?
    /// The id of the live node that advertises ``advertiseURL``, when one does.
    public let urlHolder: String?

    public var description: String {
        var reasons: [String] = []
        if let holderURL {
            reasons.append("cluster.nodeId \(nodeID) is held by a live node advertising \(holderURL)")
        }
        if let urlHolder, urlHolder != nodeID || holderURL == nil {
            reasons.append("cluster.advertiseURL \(advertiseURL) is advertised by live node \(urlHolder)")
        }
        if reasons.isEmpty { reasons.append("cluster.nodeId \(nodeID) is held by another process") }
        return reasons.joined(separator: "; ") + ": stop that process, or give this node another id and URL"
    }
}
