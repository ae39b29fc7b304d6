import LedgerCore

/// What `verify` checks of the values a sealed record holds forgotten (docs/event-format.md, "Sealed fields").
///
/// A forgotten value's commitment keeps the record's hash, whatever stands in the field: so a stand-in is proven by
/// nothing but these rules, which leave a rewrite of the log nothing to put there but what an erasure or a retention
/// sweep puts. Each forgotten seal must give a known reason — `erasure`, `retention at <time>`, or
/// `erasure; retention at <time>` — and stand in the shape that reason leaves: a registration token the pseudonym of
/// an erasure (``ErasureAccount`` then checks that a later `erased` event accounts for it), an APNs token zero bytes,
/// the content of a send to an erased device empty, a content forgotten by retention empty and inside the range of a
/// later `retention` event. (A topic send's content an erasure rewrote keeps the rest of its bytes, which no hash
/// binds: docs/compliance.md, "What an erasure leaves".)
struct ForgottenSeals {
    /// Seqs of contents forgotten by retention, still to be covered by a later `retention` event.
    private var retained: [UInt64] = []
    private(set) var problems: [String] = []

    mutating func note(_ event: LedgerEvent) {
        guard let seals = event.seals, seals.contains(where: \.isForgotten) else {
            if case .retention(let sweep) = event.body { cover(sweep) }
            return
        }
        for (value, seal) in zip(event.body.sealedValues, seals) where seal.isForgotten {
            let reason = seal.forgotten
            let byErasure = reason == Seal.erasure
            let byRetention = reason.hasPrefix("retention at ") || reason.hasPrefix(Seal.erasure + "; retention at ")
            guard byErasure || byRetention else {
                problems.append("seq \(event.seq): a value forgotten for an unknown reason")
                continue
            }
            switch value {
            case .token(let token):
                if !byErasure || !Erasure.isPseudonym(token) {
                    problems.append("seq \(event.seq): a forgotten registration token that is not an erasure's pseudonym")
                }
            case .apnsToken(let token):
                if !byErasure || token.bytes.contains(where: { $0 != 0 }) {
                    problems.append("seq \(event.seq): a forgotten APNs token that is not zero bytes")
                }
            case .content(let json):
                guard byRetention else {
                    // A send addressed to the erased device loses its content whole; a topic send's content keeps
                    // what the erasure left, the pseudonym in the token's place (``ErasureAccount`` checks that).
                    if case .sent(let sent) = event.body, case .token = sent.target, !json.isEmpty {
                        problems.append("seq \(event.seq): a send to an erased device keeps a content")
                    }
                    continue
                }
                if !json.isEmpty { problems.append("seq \(event.seq): a content forgotten by retention is not empty") }
                retained.append(event.seq)
            }
        }
    }

    private mutating func cover(_ sweep: RetentionSweep) {
        retained.removeAll { $0 >= sweep.firstSeq && $0 <= sweep.throughSeq }
    }

    /// The problems found, with every content forgotten by retention that no later `retention` event covers.
    func finish() -> [String] {
        problems
            + retained.map { "seq \($0): a content forgotten by retention that no later retention event covers" }
    }
}
