import LedgerCore

extension ClusterNode {
    /// The other nodes that hold `project` now (placement over the live members), with their advertised URLs: the
    /// replicas a leader asks to cosign its checkpoint. Read from what this node follows by a watch (the members),
    /// so it costs no etcd call.
    public func peerReplicas(of project: ProjectID) -> [(node: String, url: String)] {
        let members = context.members
        return context.holders(of: project).filter { $0 != nodeID }.compactMap { node in
            guard let url = members[node], !url.isEmpty else { return nil }
            return (node, url)
        }
    }

    /// What each replica of `project` last reported cosigning (``reportCosigned(_:size:vkey:)``), by node: one
    /// range read of the project's `cosigned/` keys.
    public func reportedCosignatures(of project: ProjectID) async throws -> [String: ReplicaCosignature] {
        try await context.etcd.cosignatures(of: project, keys: context.keys)
    }
}
