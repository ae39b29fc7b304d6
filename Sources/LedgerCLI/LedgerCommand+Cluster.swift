import ArgumentParser
import Foundation
import LedgerCluster
import LedgerCore

extension LedgerCommand {
    /// `ledger cluster`: questions asked of a cluster's etcd.
    struct Cluster: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Inspect a cluster of nodes sharing etcd (docs/cluster.md).", subcommands: [Status.self])

        /// `ledger cluster status --etcd …`: what `GET /v1/cluster` answers, read from etcd directly.
        struct Status: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Print the cluster's nodes and each project's leader and replicas, from etcd.")

            @Option(help: "etcd endpoints (host:port, comma-separated).")
            var etcd: String

            @Option(help: "Only this project (default: every project in etcd).")
            var project: String?

            @Option(help: "Output format.")
            var format: OutputFormat = .text

            func run() async throws {
                let endpoints = etcd.split(separator: ",").map { String($0.filter { $0 != " " }) }
                let projects: Set<ProjectID>?
                do {
                    projects = try project.map { [try ProjectID($0, field: "--project")] }
                } catch {
                    throw ValidationError("\(error)")
                }
                let client: EtcdClient
                do {
                    client = try EtcdClient(endpoints: endpoints)
                } catch {
                    throw InputError("\(error)")
                }
                let status = try await withThrowingTaskGroup(of: ClusterStatus?.self) { group in
                    group.addTask {
                        try await client.run()
                        return nil
                    }
                    group.addTask {
                        defer { client.close() }
                        do {
                            return try await ClusterNode.status(etcd: client, keys: ClusterKeys(), projects: projects)
                        } catch {
                            throw InputError("etcd did not answer: \(error)")
                        }
                    }
                    var status: ClusterStatus?
                    for try await result in group where result != nil { status = result }
                    return status
                }
                guard let status else { throw InputError("etcd did not answer") }
                switch format {
                case .json:
                    let encoder = JSONEncoder()
                    encoder.outputFormatting = [.sortedKeys]
                    print(String(decoding: try encoder.encode(status), as: UTF8.self))
                case .text:
                    for node in status.nodes {
                        print("node \(node.id) \(node.alive ? "alive" : "gone") \(node.url)")
                    }
                    for project in status.projects {
                        print("project \(project.project) leader \(project.leader ?? "none")")
                        for replica in project.replicas {
                            print(
                                "  replica \(replica.node) appliedSeq \(replica.appliedSeq) headHash \(replica.headHash)"
                                    + " lagEvents \(replica.lagEvents) state \(replica.state)"
                                    + (replica.cosignedSize.map { " cosignedSize \($0)" } ?? "")
                            )
                        }
                    }
                }
            }
        }
    }
}
