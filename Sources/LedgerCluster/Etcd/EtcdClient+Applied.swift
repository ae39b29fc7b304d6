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

    /// What each replica of `project` last cosigned (``ReplicaCosignature``), by node (values that do not decode
    /// are left out).
    func cosignatures(of project: ProjectID, keys: ClusterKeys) async throws -> [String: ReplicaCosignature] {
        let prefix = keys.cosigned(project)
        var found: [String: ReplicaCosignature] = [:]
        for kv in try await list(prefix: prefix).kvs {
            guard let value = try? JSONDecoder().decode(ReplicaCosignature.self, from: Data(kv.value.prefix(4096)))
            else { continue }
            found[String(String(decoding: kv.key, as: UTF8.self).dropFirst(prefix.count))] = value
        }
        return found
    }
}

/// What a replica reports to etcd when it cosigns its project's checkpoint: the size, and its vkey.
public struct ReplicaCosignature: Codable, Sendable, Equatable {
    public var size: UInt64
    public var vkey: String

    public init(size: UInt64, vkey: String) {
        self.size = size
        self.vkey = vkey
    }
}
