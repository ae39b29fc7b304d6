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

/// Between nodes: the last activity a replica saw of some devices, for the leader's expiry sweep
/// (`POST /internal/v1/projects/{project}/activity`, with a peer secret as bearer). A device's requests may be
/// served by any replica, so each knows only the activity it served; the leader asks every replica before it
/// expires a device. Devices are named by their device numbers (the same on every replica), never by tokens.
enum PeerActivity {
    /// Devices a sweep asks about (``RegistrationExpirySweeper/perSweep``), and the most one request may name.
    static let maximumDevices = 100_000
    /// Devices the sweeper names in one request: 110 KB at most, far below any request body limit.
    static let batch = 10_000
    /// The largest body the route reads: every device number at ten digits and a comma.
    static let maximumBodyBytes = maximumDevices * 12 + 64

    struct Query: Codable {
        var devices: [UInt32]
    }

    struct Answer: Codable {
        struct Entry: Codable {
            var device: UInt32
            var lastActive: Int64
        }
        var lastActive: [Entry]
    }

    static func path(_ project: ProjectID) -> String { "/internal/v1/projects/\(project.rawValue)/activity" }

    /// The last activity the replica at `baseURL` knows of `devices`: those it knows any of.
    static func ask(
        _ project: ProjectID, about devices: [InstanceID], at baseURL: String, secret: String
    ) async throws -> [(device: InstanceID, lastActive: Int64)] {
        var request = HTTPClientRequest(url: baseURL + path(project))
        request.method = .POST
        request.headers.add(name: "Authorization", value: "Bearer \(secret)")
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(bytes: try JSONEncoder().encode(Query(devices: devices))))
        let response = try await ClusterForwarder.client.execute(request, timeout: .seconds(10))
        guard response.status == .ok else {
            throw StoreError(.unavailable, "the replica at \(baseURL) answered \(response.status.code)")
        }
        let body = try await response.body.collect(upTo: maximumDevices * 48 + 64)
        let answer = try JSONDecoder().decode(Answer.self, from: Data(body.readableBytesView))
        return answer.lastActive.map { ($0.device, $0.lastActive) }
    }
}
