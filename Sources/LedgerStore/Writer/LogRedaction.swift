import LMDBKit
import LedgerCore

/// A device one erasure removes: its instance, its registration token, the pseudonym it takes and why.
package struct ErasureTarget: Sendable {
    package let instance: InstanceID
    package let token: RegistrationToken
    package let pseudonym: RegistrationToken
    package let reason: String
}

/// What an erasure rewrote for one device: where it registered first, and how many events named it.
package struct Redaction: Sendable, Equatable {
    package var registeredSeq: UInt64 = 0
    package var events: UInt64 = 0
}

/// Takes erased devices' identifiers out of the log and the projections, inside the erasing transaction.
///
/// Every record through the head that names a target's registration token (in any field, or in a sent
/// message's JSON) or an APNs token the target held is rewritten: the event with the pseudonym in place of
/// the token and zero bytes in place of the APNs token, encoded under ``EventCodec/redactedVersion``, after
/// the record's *original* hash. The chain and the Merkle tree are over those hashes, so every checkpoint and
/// proof stays valid; what `verify` can no longer do is recompute such a record's hash from its bytes
/// (docs/event-format.md, "Erasure"). Then the target's instance is renamed: its `tokens` key and its record
/// name the pseudonym, so that the `erased` event the appender adds next folds like any event naming it (it
/// ends the registration and forgets the APNs tokens: ``LedgerProjection/forgetAPNsTokens(of:)``).
///
/// The bytes replaced stay in LMDB's freed pages until the file is compacted, which the writer does before
/// answering (``LMDBEnvironment/compact()``).
enum LogRedaction {
    static func redact(_ targets: [ErasureTarget], txn: LMDBTransaction, schema: LedgerSchema) throws -> [Redaction] {
        var identifiers = Identifiers()
        for (index, target) in targets.enumerated() {
            identifiers.tokens[target.token.rawValue] = index
            for held in try APNsTokenRecord.history(of: target.instance, txn: txn, schema: schema) {
                identifiers.apnsTokens[held.token.bytes] = index
            }
            // Its ActivityKit tokens (followed topics' activity tokens, push-to-start tokens) are identifiers too.
            for held in try LiveActivityTokenRecord.history(of: target.instance, txn: txn, schema: schema) {
                identifiers.apnsTokens[held.token.bytes] = index
            }
        }
        identifiers.pseudonyms = targets.map(\.pseudonym)
        for (token, index) in identifiers.tokens {
            identifiers.encodings.add(Array(token.utf8), replacedBy: Array(targets[index].pseudonym.rawValue.utf8), owner: index)
        }
        for (apnsToken, index) in identifiers.apnsTokens {
            // The same form of the pseudonym: what verify finds to account for the record (ErasureAccount).
            identifiers.encodings.add(
                apnsToken, replacedBy: Array(targets[index].pseudonym.rawValue.utf8), owner: index, binary: true)
        }
        let needles = NeedleIndex(identifiers.needles)
        var redactions = Array(repeating: Redaction(), count: targets.count)
        var rewritten: [(seq: UInt64, record: [UInt8])] = []
        try txn.withCursor(schema.log) { cursor in
            try cursor.forEach { entry in
                guard entry.value.count > HashChain.hashSize else {
                    throw StoreError(.corrupt, "a log record of \(entry.value.count) bytes")
                }
                let encoded = UnsafeRawBufferPointer(rebasing: entry.value[HashChain.hashSize...])
                guard identifiers.mayBeNamed(in: encoded, needles: needles) else { return true }
                let event = try EventCodec.decode(encoded)
                var touched: [Int] = []
                guard let redacted = identifiers.rewrite(event, touched: &touched) else { return true }
                if case .registered(let token, _, _) = event.body, let index = identifiers.tokens[token.rawValue],
                    redactions[index].registeredSeq == 0
                {
                    redactions[index].registeredSeq = event.seq
                }
                for index in Set(touched) { redactions[index].events += 1 }
                rewritten.append((event.seq, Array(entry.value[..<HashChain.hashSize]) + (try Self.encode(redacted, of: event))))
                return true
            }
        }
        for (seq, record) in rewritten { try txn.put(schema.log, key: seq, value: record) }
        let projection = LMDBProjection(txn: txn, schema: schema)
        for target in targets {
            _ = try txn.delete(schema.tokens, key: NameKey(target.token.rawValue))
            guard
                try txn.put(
                    schema.tokens, key: NameKey(target.pseudonym.rawValue), value: target.instance, flags: .noOverwrite)
            else { throw StoreError(.corrupt, "a fresh pseudonym is taken") }
            var record = try projection.record(of: target.instance)
            record.token = target.pseudonym.rawValue
            try txn.put(schema.instances, key: target.instance, value: record.encoded)
        }
        return redactions
    }

    /// The record's new bytes: a sealed event keeps its encoding version, each value the rewrite changed forgotten
    /// (its seal's key replaced by its commitment, ``Seal/forgetting(_:reason:)``), so that its hash still recomputes
    /// and nothing in it links to the identifier; an older one is rewritten under ``EventCodec/redactedVersion``.
    private static func encode(_ redacted: LedgerEvent, of original: LedgerEvent) throws -> [UInt8] {
        guard original.seals != nil else { return EventCodec.encodeRedacted(redacted) }
        var sealed = redacted
        // Never the original seals beside the stand-ins: their keys would open the commitments again.
        guard let seals = original.seals(forgettingChangesIn: redacted.body, reason: Seal.erasure) else {
            throw StoreError(.corrupt, "event \(original.seq) has seals that do not match its sealed values")
        }
        sealed.seals = seals
        return EventCodec.encode(sealed)
    }

    /// The identifiers being erased, each with the index of its target.
    struct Identifiers {
        var tokens: [String: Int] = [:]
        var apnsTokens: [[UInt8]: Int] = [:]
        var pseudonyms: [RegistrationToken] = []
        /// Every form of every identifier inside a message's content, with the same form of its replacement.
        var encodings = IdentifierEncodings()

        /// Every form of the identifiers, searched for in each record (made once: the log has a million records).
        /// The raw identifiers name them in fields; the forms, in contents.
        var needles: [[UInt8]] { tokens.keys.map { Array($0.utf8) } + Array(apnsTokens.keys) + encodings.needles }

        /// Whether `encoded` may name one of `needles`: `false` only when it certainly does not. One pass over the
        /// record however many identifiers there are (#65: a device that held thousands of APNs tokens), so that a
        /// record is decoded only when it may name one.
        func mayBeNamed(in encoded: UnsafeRawBufferPointer, needles: NeedleIndex) -> Bool {
            needles.occurs(in: encoded)
        }

        /// `event` with every identifier replaced, noting which targets it named; `nil` when it named none.
        func rewrite(_ event: LedgerEvent, touched: inout [Int]) -> LedgerEvent? {
            func renamed(_ token: RegistrationToken) -> RegistrationToken {
                guard let index = tokens[token.rawValue] else { return token }
                touched.append(index)
                return pseudonyms[index]
            }
            var result = event
            switch event.body {
            case .registered(let token, let platform, let appID):
                result.body = .registered(token: renamed(token), platform: platform, appID: appID)
            case .unregistered(let token, let reason):
                result.body = .unregistered(token: renamed(token), reason: reason)
            case .subscribed(let token, let topic, let via):
                result.body = .subscribed(token: renamed(token), topic: topic, via: via)
            case .unsubscribed(let token, let topic, let via):
                result.body = .unsubscribed(token: renamed(token), topic: topic, via: via)
            case .acknowledged(let token, let through):
                result.body = .acknowledged(token: renamed(token), through: through)
            case .apnsTokenCleared(let token, let reason):
                result.body = .apnsTokenCleared(token: renamed(token), reason: reason)
            case .apnsTokenSet(let token, var apnsToken):
                // Only the target's own records: another device holding the same APNs token (a reinstall, a copy)
                // keeps its record as it is.
                if tokens[token.rawValue] != nil, let index = apnsTokens[apnsToken.bytes] {
                    touched.append(index)
                    // Zero bytes of the same length: a valid APNs token that names no device.
                    apnsToken =
                        (try? APNsDeviceToken(
                            bytes: [UInt8](repeating: 0, count: apnsToken.bytes.count),
                            sandbox: apnsToken.sandbox)) ?? apnsToken
                }
                result.body = .apnsTokenSet(token: renamed(token), apnsToken: apnsToken)
            case .liveActivityFollowed(let token, let topic, let pushToken):
                let stand = zeroed(pushToken, of: token, touched: &touched)
                result.body = .liveActivityFollowed(token: renamed(token), topic: topic, pushToken: stand)
            case .pushToStartTokenSet(let token, let attributesType, let pushToken):
                let stand = zeroed(pushToken, of: token, touched: &touched)
                result.body = .pushToStartTokenSet(
                    token: renamed(token), attributesType: attributesType, pushToken: stand)
            case .liveActivityUnfollowed(let token, let topic, let reason):
                result.body = .liveActivityUnfollowed(token: renamed(token), topic: topic, reason: reason)
            case .sent(var sent):
                if case .token(let token) = sent.target {
                    sent.target = .token(renamed(token))
                    // A message addressed to the device is its data: the fact, time, target (the pseudonym),
                    // audience and commitment stay; the content goes.
                    if sent.target != .token(token) { sent.messageJSON = [] }
                }
                // Every form of a token or APNs token inside the content: the same form of its replacement.
                if let rewrite = encodings.rewrite(sent.messageJSON) {
                    touched.append(contentsOf: rewrite.owners)
                    sent.messageJSON = rewrite.bytes
                }
                result.body = .sent(sent)
            case .pushProgress(var progress):
                progress.throughToken = progress.throughToken.map(renamed)
                progress.failures = progress.failures.map { failure in
                    var failure = failure
                    failure.token = renamed(failure.token)
                    return failure
                }
                result.body = .pushProgress(progress)
            case .audience, .erased, .retention, .liveActivityChannelCreated, .liveActivityChannelDeleted,
                .liveActivitiesEnded:
                return nil
            }
            return touched.isEmpty ? nil : result
        }

        /// An ActivityKit token of a target's own record (`owner` is the device that set it) as zero bytes of the
        /// same length; any other device's record keeps its token.
        func zeroed(_ pushToken: APNsDeviceToken, of owner: RegistrationToken, touched: inout [Int])
            -> APNsDeviceToken
        {
            guard tokens[owner.rawValue] != nil, let index = apnsTokens[pushToken.bytes] else { return pushToken }
            touched.append(index)
            return (try? APNsDeviceToken(bytes: [UInt8](repeating: 0, count: pushToken.bytes.count), sandbox: false))
                ?? pushToken
        }
    }
}
