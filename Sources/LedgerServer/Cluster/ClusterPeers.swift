import AsyncHTTPClient
import Foundation
import LedgerCore
import LedgerStore
import NIOCore
import NIOHTTP1
import _NIOFileSystem

/// Between nodes: the consistent copy of a project's ledger one node gives another that must be seeded
/// (`GET /internal/v1/projects/{project}/snapshot`, with a peer secret as bearer).
enum ClusterPeers {
    /// The path of the snapshot route of `project` under a node's base URL.
    static func snapshotPath(_ project: ProjectID) -> String { "/internal/v1/projects/\(project.rawValue)/snapshot" }

    /// Downloads `project`'s copy from the node at `baseURL` into a directory of its own under `directory`,
    /// synced: the path of its `data.mdb` (`<directory>/<uuid>/<project>/data.mdb`).
    static func download(_ project: ProjectID, from baseURL: String, secret: String, into directory: String)
        async throws -> String
    {
        var request = HTTPClientRequest(url: baseURL + snapshotPath(project))
        request.headers.add(name: "Authorization", value: "Bearer \(secret)")
        let response = try await ClusterForwarder.client.execute(request, timeout: .minutes(30))
        guard response.status == .ok else {
            throw StoreError(.unavailable, "the peer at \(baseURL) answered \(response.status.code) for a copy")
        }
        let target = directory + "/" + UUID().uuidString + "/" + project.rawValue
        try FileManager.default.createDirectory(
            atPath: target, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let path = target + "/data.mdb"
        try await FileSystem.shared.withFileHandle(
            forWritingAt: FilePath(path), options: .newFile(replaceExisting: true)
        ) { handle in
            var writer = handle.bufferedWriter()
            for try await chunk in response.body { _ = try await writer.write(contentsOf: chunk) }
            try await writer.flush()
            try await handle.synchronize()
        }
        return path
    }
}
