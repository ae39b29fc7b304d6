import LedgerCore

/// What `verify` checks of erasures: every rewritten record is accounted for by an `erased` event after it
/// that names its pseudonym, and each `erased` event's count of rewritten records is exact.
///
/// A rewritten record's hash cannot be recomputed from its bytes (its identifiers are gone), so this is
/// what ties its remaining content to the chain: the `erased` event's own bytes are chained and hashed like
/// any other, and it says how many records carry its pseudonym.
struct ErasureAccount {
    private struct Named {
        let seq: UInt64
        let tokens: Set<String>
        let messageJSON: [UInt8]
    }

    private var redacted: [Named] = []
    private var recorded: [(erasure: Erasure, seq: UInt64)] = []
    private var emptied: [UInt64] = []

    var erasures: Int { recorded.count }
    var redactedEvents: Int { redacted.count }

    mutating func noteRedacted(_ event: LedgerEvent) {
        var tokens: Set<String> = []
        var json: [UInt8] = []
        switch event.body {
        case .registered(let token, _, _), .unregistered(let token, _), .subscribed(let token, _, _),
            .unsubscribed(let token, _, _), .acknowledged(let token, _), .apnsTokenSet(let token, _),
            .apnsTokenCleared(let token, _):
            tokens.insert(token.rawValue)
        case .sent(let sent):
            if case .token(let token) = sent.target { tokens.insert(token.rawValue) }
            json = sent.messageJSON
        case .pushProgress(let progress):
            if let through = progress.throughToken { tokens.insert(through.rawValue) }
            for failure in progress.failures { tokens.insert(failure.token.rawValue) }
        case .audience, .erased, .retention:
            break
        }
        redacted.append(Named(seq: event.seq, tokens: tokens, messageJSON: json))
    }

    /// A send an erasure rewrote (identifiers inside its content) whose content a retention sweep then forgot: it
    /// no longer says which erasure rewrote it, so it may count for any erasure after it.
    mutating func noteEmptied(at seq: UInt64) {
        emptied.append(seq)
    }

    mutating func noteErasure(_ erasure: Erasure, at seq: UInt64) {
        recorded.append((erasure, seq))
    }

    /// Each rewritten record no erasure accounts for, and each erasure whose count is not what the log holds.
    func problems() -> [String] {
        var problems: [String] = []
        var accounted = Set<UInt64>()
        for (erasure, seq) in recorded {
            let name = erasure.pseudonym.rawValue
            // A message's content names the pseudonym in the form it named the token (or APNs token) in.
            let forms = IdentifierEncodings.encodings(of: Array(name.utf8))
            let naming = redacted.filter { record in
                record.seq < seq
                    && (record.tokens.contains(name)
                        || forms.contains { ByteSearch.contains(record.messageJSON, $0) })
            }
            accounted.formUnion(naming.map(\.seq))
            let unnamed = UInt64(emptied.filter { $0 < seq }.count)
            if UInt64(naming.count) > erasure.redactedEvents || erasure.redactedEvents > UInt64(naming.count) + unnamed
            {
                problems.append(
                    "seq \(seq): the erasure of \(name) rewrote \(erasure.redactedEvents) event(s), but "
                        + "\(naming.count) rewritten event(s) before it name it")
            }
        }
        for record in redacted where !accounted.contains(record.seq) {
            problems.append("seq \(record.seq): a rewritten (erased) event that no later `erased` event accounts for")
        }
        return problems
    }
}
