import LedgerCore
import LedgerStore

/// One erasure or expiry as `ledger audit erasures` and `GET …/audit/erasures` list them: when, by whom, why,
/// and the device — by its pseudonym when erased, by its token when its registration expired (an expired
/// device keeps its history under its token, like any unregistered one).
public struct ErasureRecord: Sendable, Equatable {
    public enum Kind: String, Sendable {
        /// The device's identifiers were erased (an `erased` event).
        case erased
        /// Its registration expired after the project's `registrationExpiry` without activity (an `unregistered`
        /// event by `expiry`, its reason starting with `expired`).
        case expired
    }

    public var kind: Kind
    /// The seq of the event.
    public var seq: UInt64
    public var time: LedgerTime
    /// The credential that erased it, or `expiry`.
    public var actor: String
    public var reason: String
    /// The pseudonym of an erased device; the token of an expired one.
    public var device: RegistrationToken
    /// An erasure's: the seq of the device's first registration, and how many events it rewrote.
    public var registeredSeq: UInt64?
    public var redactedEvents: UInt64?
    /// An erasure's: of the events it rewrote, those written before the ledger sealed its fields (encoding version
    /// 2), whose hashes are over the erased identifiers — a holder of the token can find them by their hash.
    public var linkable: UInt64?
}

extension LedgerSnapshot {
    /// Every erasure and expiry in the log, oldest first: one pass over the log (an audit question, not a hot
    /// path).
    public func erasures() throws -> [ErasureRecord] {
        var records: [ErasureRecord] = []
        var linkable: [RegistrationToken: UInt64] = [:]
        // Rewritten sends whose content may name a pseudonym in any of its forms (an erasure rewrites every form of
        // the token in a content to the same form of the pseudonym), with the pseudonyms the record named already.
        var contents: [(named: Set<RegistrationToken>, content: [UInt8])] = []
        try forEachEncodedEvent { event, encoded in
            if EventCodec.isRedacted(encoded) {
                var named = Set<RegistrationToken>()
                for case .token(let token) in event.body.sealedValues where Erasure.isPseudonym(token) {
                    named.insert(token)
                }
                for pseudonym in named { linkable[pseudonym, default: 0] += 1 }
                if case .sent(let sent) = event.body, !sent.messageJSON.isEmpty {
                    contents.append((named, sent.messageJSON))
                }
            }
            switch event.body {
            case .erased(let erasure):
                records.append(
                    ErasureRecord(
                        kind: .erased, seq: event.seq, time: event.time, actor: event.actor, reason: erasure.reason,
                        device: erasure.pseudonym, registeredSeq: erasure.registeredSeq,
                        redactedEvents: erasure.redactedEvents, linkable: linkable[erasure.pseudonym] ?? 0))
            case .unregistered(let token, let reason) where event.actor == "expiry" && reason.hasPrefix("expired"):
                records.append(
                    ErasureRecord(
                        kind: .expired, seq: event.seq, time: event.time, actor: event.actor, reason: reason,
                        device: token, registeredSeq: nil, redactedEvents: nil, linkable: nil))
            default:
                break
            }
            return true
        }
        countLinkableContents(contents, into: &records)
        return records
    }

    /// Adds to each erasure's `linkable` the rewritten sends that name its pseudonym only inside their content (a
    /// topic send whose data held the token): their hashes are over the content with the token in it too.
    private func countLinkableContents(
        _ contents: [(named: Set<RegistrationToken>, content: [UInt8])], into records: inout [ErasureRecord]
    ) {
        guard !contents.isEmpty else { return }
        var encodings = IdentifierEncodings()
        for (index, record) in records.enumerated() where record.kind == .erased {
            encodings.add(Array(record.device.rawValue.utf8), replacedBy: [], owner: index)
        }
        for (named, content) in contents {
            guard let owners = encodings.rewrite(content)?.owners else { continue }
            for index in owners where !named.contains(records[index].device) {
                records[index].linkable = (records[index].linkable ?? 0) + 1
            }
        }
    }
}
