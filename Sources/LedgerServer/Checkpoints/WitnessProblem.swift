/// Why a witness did not cosign a checkpoint: a kind, which says whether two answers are the same problem, and a
/// message for `/readyz` and the log, which may carry numbers (sizes, times, an HTTP status) that change from one
/// round to the next while the problem stays the same.
///
/// A problem is logged when its kind starts and when it ends, never again for a new message of the same kind.
struct WitnessProblem: Sendable, Equatable, CustomStringConvertible {
    struct Kind: Hashable, Sendable {
        private enum Value: Hashable {
            case unreachable, noProof, sizeAboveCheckpoint, sizeNotDecimal, sizeMoving, differentRoot, untrusted
            case unknownLog, inconsistent, malformed, unexpectedStatus, noCosignature, cosignatureTime
        }

        private let value: Value

        /// The witness did not answer (connection, timeout, TLS).
        static let unreachable = Kind(value: .unreachable)
        /// The server could not prove consistency from the witness's size.
        static let noProof = Kind(value: .noProof)
        /// A 409 told a size above the checkpoint's: a bad witness, or anything between the server and it.
        static let sizeAboveCheckpoint = Kind(value: .sizeAboveCheckpoint)
        static let sizeNotDecimal = Kind(value: .sizeNotDecimal)
        /// Each retry's 409 told another size.
        static let sizeMoving = Kind(value: .sizeMoving)
        /// A 409 without a size: the witness cosigned another root at this size.
        static let differentRoot = Kind(value: .differentRoot)
        static let untrusted = Kind(value: .untrusted)
        static let unknownLog = Kind(value: .unknownLog)
        static let inconsistent = Kind(value: .inconsistent)
        static let malformed = Kind(value: .malformed)
        /// An HTTP status the protocol does not give, whichever.
        static let unexpectedStatus = Kind(value: .unexpectedStatus)
        /// A 200 without a valid cosignature by the witness's key.
        static let noCosignature = Kind(value: .noCosignature)
        /// A valid cosignature dated 0, or too far ahead of the server's clock.
        static let cosignatureTime = Kind(value: .cosignatureTime)
    }

    let kind: Kind
    let message: String

    init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    var description: String { message }
}
