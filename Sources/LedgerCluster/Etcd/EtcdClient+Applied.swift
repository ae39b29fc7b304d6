import EtcdAPI
import Foundation
import LedgerCore

extension EtcdClient {
    /// How far each replica of `project` has applied its log, by node (values that are not a position are
    /// left out).
    func appliedPositions(of project: ProjectID, keys: ClusterKeys) async throws -> [String: ReplicationTail] {
        let prefix = keys.applied(project)
        var positions: [String: ReplicationTail] = [:]
        for kv in try await list(prefix: prefix).kvs {
            guard let position = try? ReplicationTail(decoding: kv.value) else { continue }
            positions[String(String(decoding: kv.key, as: UTF8.self).dropFirst(prefix.count))] = position
        }
        return positions
    }

    /// The state each replica of `project` last reported (``ReplicaProgress/State``, as text), by node.
    func replicaStates(of project: ProjectID, keys: ClusterKeys) async throws -> [String: String] {
        let prefix = keys.states(project)
        var states: [String: String] = [:]
        for kv in try await list(prefix: prefix).kvs {
            states[String(String(decoding: kv.key, as: UTF8.self).dropFirst(prefix.count))] =
                String(decoding: kv.value.prefix(1024), as: UTF8.self)
        }
        return states
    }
}
