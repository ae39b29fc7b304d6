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
            .apnsTokenCleared(let token, _), .liveActivityFollowed(let token, _, _),
            .liveActivityUnfollowed(let token, _, _), .pushToStartTokenSet(let token, _, _):
            tokens.insert(token.rawValue)
        case .sent(let sent):
            if case .token(let token) = sent.target { tokens.insert(token.rawValue) }
            json = sent.messageJSON
        case .pushProgress(let progress):
            if let through = progress.throughToken { tokens.insert(through.rawValue) }
            for failure in progress.failures { tokens.insert(failure.token.rawValue) }
        case .audience, .erased, .retention, .liveActivityChannelCreated, .liveActivityChannelDeleted,
            .liveActivitiesEnded:
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
    ///
    /// Linear in the records and erasures (#65: it was a pass over every rewritten record, and ~13 byte searches in
    /// each, per erasure): each pseudonym is looked up in a map, and each content is scanned once for every form of
    /// every pseudonym (``NeedleIndex``).
    func problems() -> [String] {
        var comparisons = 0
        return problems(comparisons: &comparisons)
    }

    /// ``problems()``, counting the needles compared in contents (the work that grew with erasures × contents).
    func problems(comparisons: inout Int) -> [String] {
        // The erasures each pseudonym names (more than one only in a log that reuses one).
        var byName: [String: [Int]] = [:]
        // A message's content names the pseudonym in the form it named the token (or APNs token) in.
        var forms = NeedleIndex()
        var formOwners: [[Int]] = []
        var formPositions: [[UInt8]: Int] = [:]
        for (index, (erasure, _)) in recorded.enumerated() {
            let name = erasure.pseudonym.rawValue
            byName[name, default: []].append(index)
            for form in IdentifierEncodings.encodings(of: Array(name.utf8)) {
                if let position = formPositions[form] {
                    if formOwners[position].last != index { formOwners[position].append(index) }
                } else {
                    formPositions[form] = forms.insert(form)
                    formOwners.append([index])
                }
            }
        }
        var naming = Array(repeating: 0, count: recorded.count)
        var accounted = Set<UInt64>()
        for record in redacted {
            var names = Set<Int>()
            for token in record.tokens { names.formUnion(byName[token] ?? []) }
            if !record.messageJSON.isEmpty {
                for position in forms.occurring(in: record.messageJSON, comparisons: &comparisons) {
                    names.formUnion(formOwners[position])
                }
            }
            for index in names where record.seq < recorded[index].seq {
                naming[index] += 1
                accounted.insert(record.seq)
            }
        }
        let emptied = self.emptied.sorted()
        var problems: [String] = []
        for (index, (erasure, seq)) in recorded.enumerated() {
            let name = erasure.pseudonym.rawValue
            let unnamed = UInt64(Self.count(of: emptied, below: seq))
            if UInt64(naming[index]) > erasure.redactedEvents
                || erasure.redactedEvents > UInt64(naming[index]) + unnamed
            {
                problems.append(
                    "seq \(seq): the erasure of \(name) rewrote \(erasure.redactedEvents) event(s), but "
                        + "\(naming[index]) rewritten event(s) before it name it")
            }
        }
        for record in redacted where !accounted.contains(record.seq) {
            problems.append("seq \(record.seq): a rewritten (erased) event that no later `erased` event accounts for")
        }
        return problems
    }

    /// How many of `sorted` are below `seq`.
    private static func count(of sorted: [UInt64], below seq: UInt64) -> Int {
        var low = 0
        var high = sorted.count
        while low < high {
            let middle = (low + high) / 2
            if sorted[middle] < seq { low = middle + 1 } else { high = middle }
        }
        return low
    }
}
