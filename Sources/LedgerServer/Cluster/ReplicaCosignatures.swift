import Foundation
import LedgerCore
import LedgerQueries
import Synchronization

/// This node's part in its cluster's cosigning (``ReplicaCosigning``): its cosigner key, and the last checkpoint
/// of each project it led that its replicas cosigned, so that a checkpoint is cosigned once.
///
/// - Note: Thread-safe. The key file is read on the checkpoints' worker, outside the lock.
final class ReplicaCosignatures: Sendable {
    private struct State {
        /// This node's cosigner key, once read (``cosigner(name:)``).
        var cosigner: Cosigner?
        /// The last checkpoint of each project that its replicas cosigned, with their lines.
        var cosigned: [ProjectID: SignedNote] = [:]
    }

    private let state = Mutex(State())
    private let dataDirectory: String
    private let signers: CheckpointSigners

    init(dataDirectory: String, signers: CheckpointSigners) {
        self.dataDirectory = dataDirectory
        self.signers = signers
    }

    /// This node's cosigner key (`<data>/node-cosigner.key`, made on first use, mode 0600) under `name`: what it
    /// cosigns its projects' checkpoints with, as a replica.
    ///
    /// - Throws: `StoreError` when the key file cannot be made or read.
    func cosigner(name: String) async throws -> Cosigner {
        if let cosigner = state.withLock({ $0.cosigner }) { return cosigner }
        let path = (dataDirectory as NSString).appendingPathComponent("node-cosigner.key")
        let cosigner = try await signers.onWorker { try CosignerKeyFile.open(path, name: name) }
        state.withLock { $0.cosigner = cosigner }
        return cosigner
    }

    /// `signed` with its replicas' cosignatures (``ReplicaCosigning/collect(_:project:server:)``), collected once
    /// per checkpoint signed.
    func cosigned(_ signed: SignedNote, of project: ProjectID, server: ServerContext) async -> SignedNote {
        if let last = state.withLock({ $0.cosigned[project] }), last.checkpoint.size == signed.checkpoint.size,
            last.body == signed.body
        {
            return last
        }
        let cosigned = signed.adding(await ReplicaCosigning.collect(signed, project: project, server: server))
        state.withLock { $0.cosigned[project] = cosigned }
        return cosigned
    }
}
