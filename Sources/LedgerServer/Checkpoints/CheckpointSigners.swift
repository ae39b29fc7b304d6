import Foundation
import LedgerCore
import LedgerQueries
import LedgerStore
import Logging
import Synchronization

/// The checkpoint signer of each served project (``CheckpointSigner``), its key opened on first use, and the
/// worker that does the checkpoints' file I/O: opening keys, signing (a read of the tree, then an append to
/// `checkpoints.jsonl` and a sync), keeping cosigned checkpoints and reading the last one kept, and computing
/// consistency proofs for the witnesses.
///
/// - Note: Thread-safe.
final class CheckpointSigners: Sendable {
    private struct State {
        var signers: [ProjectID: CheckpointSigner] = [:]
        /// Why a project's checkpoint signer could not be made, when the last try failed.
        var problems: [ProjectID: String] = [:]
    }

    private let state = Mutex(State())
    /// The checkpoints' file writer: every checkpoint file of every project is written here, one job at a time
    /// and in order, off the cooperative pool and outside any lock.
    let worker = SerialWorker<BlockingJob, Void>(name: "ledger-checkpoints")
    private let configuration: ServerConfiguration
    private let logger: Logger

    init(configuration: ServerConfiguration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
    }

    /// The checkpoint signer of `project` (its key made on first use: ``CheckpointKeeper``).
    ///
    /// A key that cannot be used (readable by others, not a signing key, another name) is logged once, with
    /// its path, and is the project's readiness problem until a later try succeeds.
    ///
    /// - Throws: `StoreError`, whose message may name the key's path: not for clients.
    func signer(for project: ProjectID) async throws -> CheckpointSigner {
        if let signer = state.withLock({ $0.signers[project] }) { return signer }
        return try await worker.perform { [self] in try makeSigner(project) }
    }

    /// Whether `project`'s checkpoint key could not be used at the last try.
    func hasProblem(_ project: ProjectID) -> Bool { state.withLock { $0.problems[project] != nil } }

    /// Runs `body` on the checkpoints' worker.
    func onWorker<Value: Sendable>(_ body: @escaping @Sendable () throws -> Value) async throws -> Value {
        try await worker.perform(body)
    }

    /// Opens `project`'s checkpoint key (on the worker's thread), or records why it cannot be used.
    private func makeSigner(_ project: ProjectID) throws -> CheckpointSigner {
        if let signer = state.withLock({ $0.signers[project] }) { return signer }
        do {
            let signer = CheckpointSigner(
                keeper: try CheckpointKeeper.open(
                    dataDirectory: configuration.dataDirectory, project: project,
                    settings: configuration.checkpoints[project] ?? CheckpointSettings()),
                worker: worker, logger: logger)
            state.withLock { state in
                state.signers[project] = signer
                state.problems.removeValue(forKey: project)
            }
            return signer
        } catch let error as StoreError {
            let previous = state.withLock { $0.problems.updateValue(error.message, forKey: project) }
            if previous != error.message {
                logger.error(
                    "the checkpoint key of a project cannot be used; its checkpoints get 503 UNAVAILABLE",
                    metadata: ["ledger.project": "\(project)", "error": "\(error)"])
            }
            throw error
        }
    }

    /// Checks the checkpoint key of every project of `projects` that has one already (see
    /// ``LedgerRegistry/checkCheckpointKeys()``).
    ///
    /// - Throws: `StoreError` `.invalidArgument` or `.unavailable`, naming the key file.
    func checkKeys(of projects: Set<ProjectID>) throws {
        for project in projects.sorted(by: { $0.rawValue < $1.rawValue }) {
            do {
                _ = try CheckpointKeeper.open(
                    dataDirectory: configuration.dataDirectory, project: project,
                    settings: configuration.checkpoints[project] ?? CheckpointSettings(), create: false)
            } catch let error as StoreError where error.code.kind == .notFound {
                continue
            }
        }
    }

    /// The consistency proof of `ledger`'s log from `old` to `new` events, on the worker.
    func consistencyProof(of ledger: Ledger, from old: UInt64, to new: UInt64) async throws -> [[UInt8]] {
        try await worker.perform {
            try ledger.read { try $0.merkleTree(size: new).consistencyProof(from: old) }
        }
    }

    /// Keeps a cosigned checkpoint (``CheckpointKeeper/keepCosigned(size:note:)``: an append and a sync), on the
    /// worker.
    func keepCosigned(_ note: SignedNote, by keeper: CheckpointKeeper) async throws {
        try await worker.perform { try keeper.keepCosigned(size: note.checkpoint.size, note: note.text) }
    }

    /// The last cosigned checkpoint `keeper` kept (`cosigned.jsonl`), read on the worker; nil when none was (or
    /// the last line is not a note: it is not served).
    ///
    /// - Throws: `StoreError` when the file cannot be read or holds a line that is not a kept checkpoint.
    func lastCosigned(by keeper: CheckpointKeeper) async throws -> SignedNote? {
        let last = try await worker.perform { try keeper.lastCosigned() }
        return last.flatMap { try? SignedNote(parsing: $0.note) }
    }

    /// Signs a last checkpoint of each of `ledgers` whose log grew since its last one (the server's shutdown:
    /// the kept checkpoints then end at the final head). Failures are logged, not thrown: a stopping server
    /// still closes its ledgers.
    func signFinalCheckpoints(of ledgers: [ProjectID: Ledger]) async {
        for (project, ledger) in ledgers {
            do {
                try await signer(for: project).signIfGrown(ledger)
            } catch {
                logger.error(
                    "could not sign the shutdown checkpoint",
                    metadata: ["ledger.project": "\(project)", "error": "\(error)"])
            }
        }
    }
}
