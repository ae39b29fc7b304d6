import FCMWire
import LedgerCore
import LedgerStore
import Logging

extension ServerContext {
    /// The project's latest checkpoint of `ledger` (signed now unless the last is under a second old or the log
    /// has not grown), or 503 UNAVAILABLE with a reason and no file paths when its signing key cannot be used (the
    /// registry logs the detail once, and `/readyz` reports it). The note is parsed once, where it is signed, and
    /// passed on as a value.
    ///
    /// In a cluster (this node leads the project: checkpoints are forwarded to the leader), with its replicas'
    /// cosignatures. With witnesses configured, the latest checkpoint that a quorum of them cosigned, with their
    /// cosignature lines: the one signed now once they cosign it (submitted here, on demand, if it is new), or an
    /// older one; 503 when none ever was.
    func latestCheckpoint(for project: ProjectID, of ledger: Ledger) async throws -> SignedNote {
        let signer = try await checkpointSigner(for: project)
        let signedHere = try await signer.latest(of: ledger)
        let signed =
            ledgers.cluster == nil
            ? signedHere : await ledgers.cosignatures.cosigned(signedHere, of: project, server: self)
        let witnesses: CheckpointWitnesses
        do {
            guard let configured = try await ledgers.witnesses.witnesses(for: project, keeper: signer.keeper) else {
                return signed
            }
            witnesses = configured
        } catch let error as StoreError {
            ledgers.logger.error(
                "the project's cosigned checkpoints cannot be read; its checkpoints get 503 UNAVAILABLE",
                metadata: ["ledger.project": "\(project)", "error": "\(error)"])
            throw FCMError.unavailable(
                "Project \(project)'s cosigned checkpoints cannot be read (the server log says why).")
        }
        let signers = ledgers.signers
        let keeper = signer.keeper
        let size = signed.checkpoint.size
        let cosigned = await witnesses.cosigned(
            signed, proof: { old in try await signers.consistencyProof(of: ledger, from: old, to: size) },
            keep: { note in try await signers.keepCosigned(note, by: keeper) })
        guard let cosigned else {
            let requirement = witnesses.requirement
            throw FCMError.unavailable(
                "Project \(project) has no checkpoint cosigned by \(requirement.quorum) of its "
                    + "\(requirement.witnesses.count) witnesses yet (/readyz says which witness fails and why).")
        }
        return cosigned
    }

    /// Returns once `project` has a signed checkpoint covering `size` events, or once its signer may sign one
    /// again (within a second), whichever is first: a notification, then ``latestCheckpoint(for:of:)`` covers
    /// `size` (signing it if no one else did).
    func waitForCheckpoint(covering size: UInt64, of project: ProjectID) async throws {
        try await checkpointSigner(for: project).waitForCheckpoint(covering: size)
    }

    /// The project's checkpoint signer, or 503 UNAVAILABLE when its signing key cannot be used.
    private func checkpointSigner(for project: ProjectID) async throws -> CheckpointSigner {
        do {
            return try await ledgers.signers.signer(for: project)
        } catch is StoreError {
            throw FCMError.unavailable(
                "Project \(project) cannot sign checkpoints: its signing key cannot be used (the server log says why).")
        }
    }
}
