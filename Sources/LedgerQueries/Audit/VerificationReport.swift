import LedgerStore
import Foundation
import LedgerCore

/// What `verify` found.
public struct VerificationReport: Sendable {
    /// Events checked (the head seq of the snapshot verified).
    public var events: UInt64
    /// Each problem found, naming the seq or projection at fault. Empty when the ledger is sound.
    public var problems: [String]
    /// Sends with no `audience` event yet. Not damage: a running server records them moments after the
    /// send, and a writer opening the ledger records any a crash left behind.
    public var sendsWithoutAudience = 0
    /// Recorded audiences recomputed and compared (with `checkAudiences`).
    public var audiencesChecked = 0
    /// Of those, audiences whose digest could not be recomputed — version 1, over tokens of which one was
    /// erased since — and whose recipient count alone was compared.
    public var audiencesCountOnly = 0
    /// `erased` events in the log.
    public var erasures = 0
    /// Events whose identifiers an erasure removed: sealed ones with their values forgotten (their hashes still
    /// recompute), and ones written before the ledger sealed, rewritten (their bytes no longer reproduce them).
    public var redactedEvents = 0
    /// Of those, the ones written before the ledger sealed (encoding version 2): each keeps the hash of its original
    /// bytes, so whoever holds the token can rebuild the original, hash it and find the record — linking the
    /// pseudonym and its history back to the token (docs/compliance.md, "What stays linkable").
    public var linkable = 0

    public var isSound: Bool { problems.isEmpty }
}
