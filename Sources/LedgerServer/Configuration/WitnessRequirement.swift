import Foundation
import LedgerCore

/// A project's witnesses (`projects.<p>.witnesses` and `witnessQuorum`, docs/server.md): the C2SP tlog-witness
/// services its checkpoints are submitted to, and how many of them must cosign a checkpoint before it is served.
public struct WitnessRequirement: Sendable, Equatable {
    /// One witness: where its `add-checkpoint` is (`<url>/add-checkpoint`), and its cosigner key.
    public struct Witness: Sendable, Equatable {
        public var url: String
        public var key: CosignatureVerifier

        public init(url: String, key: CosignatureVerifier) {
            self.url = url
            self.key = key
        }
    }

    public var witnesses: [Witness]
    /// Cosignatures a served checkpoint carries at least (1…witnesses.count).
    public var quorum: Int

    /// - Throws: `LedgerCoreError.invalidArgument` (at `field`) for no witnesses, a quorum outside 1…count, or a
    ///   key given twice.
    public init(
        witnesses: [Witness], quorum: Int? = nil, field: String = "witnesses", quorumField: String = "witnessQuorum"
    ) throws {
        guard !witnesses.isEmpty else {
            throw LedgerCoreError(.invalidArgument, field: field, "a list of one witness or more")
        }
        guard Set(witnesses.map(\.key)).count == witnesses.count else {
            throw LedgerCoreError(.invalidArgument, field: field, "a witness key is given twice")
        }
        let quorum = quorum ?? witnesses.count
        guard (1...witnesses.count).contains(quorum) else {
            throw LedgerCoreError(
                .invalidArgument, field: quorumField, "between 1 and the number of witnesses, \(witnesses.count)")
        }
        self.witnesses = witnesses
        self.quorum = quorum
    }
}
