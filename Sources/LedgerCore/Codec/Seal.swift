import Crypto

/// How one sealed value of an event is held: with the key of its hiding commitment, or forgotten.
///
/// Each identifier and each message content enters the hash chain only through its *commitment*,
/// `HMAC-SHA-256(key, value)` under a random 256-bit key (docs/event-format.md, "Sealed fields"). A record keeps the
/// value beside its key, so that the commitment, and with it the record's hash, can be recomputed. To forget the
/// value, a rewrite replaces value and key with the commitment: the hash still recomputes, and without the key the
/// commitment is a pseudorandom function's output that no holder of the value can test.
///
/// Keys: one per sealed value, made as the event is appended (``EventSealer`` says why not one per device).
public struct Seal: Sendable, Equatable {
    /// The key, when the record holds the value (32 bytes); `nil` once forgotten.
    public var key: [UInt8]?
    /// The commitment, once forgotten (32 bytes); `nil` while the key is held.
    public var commitment: [UInt8]?
    /// Why the value was forgotten (`erasure`, `retention at <time>`); empty while held.
    public var forgotten: String

    /// The size of a key and of a commitment.
    public static let size = 32
    /// ``forgotten`` for a value an erasure forgot.
    public static let erasure = "erasure"

    /// A value held under `key`.
    public init(key: [UInt8]) {
        self.key = key
        self.commitment = nil
        self.forgotten = ""
    }

    /// A value forgotten: `commitment` stands for it, for the reason `forgotten`.
    public init(commitment: [UInt8], forgotten: String) {
        self.key = nil
        self.commitment = commitment
        self.forgotten = forgotten
    }

    /// Whether the value is forgotten (the record holds a stand-in, not the value).
    public var isForgotten: Bool { key == nil }

    /// A fresh random key (the kernel's random numbers).
    public static func newKey() -> [UInt8] {
        var generator = PooledSystemRandomNumberGenerator()
        return withUnsafeTemporaryAllocation(of: UInt64.self, capacity: size / 8) { words in
            generator.fill(words)
            return Array(UnsafeRawBufferPointer(words))
        }
    }

    /// `HMAC-SHA-256(key, value)`.
    ///
    /// Written out (RFC 2104: `SHA-256((K ⊕ opad) ‖ SHA-256((K ⊕ ipad) ‖ value))`, the key padded with zeros to the
    /// 64-byte block) for keys of at most one block, as every seal key is: swift-crypto's `HMAC(key:)` builds its
    /// pads in `SymmetricKey`s on the heap, which was 7 % of a bulk import's samples, more than the hashing. The
    /// bytes are HMAC's (SealTests pin them against swift-crypto's and Python's).
    public static func commitment(key: [UInt8], value: some Sequence<UInt8>) -> [UInt8] {
        guard key.count <= hmacBlock else {
            var mac = HMAC<SHA256>(key: SymmetricKey(data: key))
            mac.update(data: Array(value))
            return Array(mac.finalize())
        }
        if let digest = value.withContiguousStorageIfAvailable({
            commitmentDigest(key: key, value: UnsafeRawBufferPointer($0))
        }) {
            return Array(digest)
        }
        return Array(Array(value).withUnsafeBytes { commitmentDigest(key: key, value: $0) })
    }

    /// SHA-256's block, the most key ``commitmentDigest(key:value:)`` takes.
    static let hmacBlock = 64

    /// `HMAC-SHA-256(key, value)` for a key of at most ``hmacBlock`` bytes, as a digest (no array): the path of the
    /// appender and `verify` (``SealedTokenForm``).
    static func commitmentDigest(key: [UInt8], value: UnsafeRawBufferPointer) -> SHA256Digest {
        precondition(key.count <= hmacBlock, "a seal key is at most one block")
        return withUnsafeTemporaryAllocation(byteCount: hmacBlock, alignment: 8) { pad in
            pad.initializeMemory(as: UInt8.self, repeating: 0x36)
            for (offset, byte) in key.enumerated() { pad[offset] = byte ^ 0x36 }
            var inner = SHA256()
            inner.update(bufferPointer: UnsafeRawBufferPointer(pad))
            inner.update(bufferPointer: value)
            let innerDigest = inner.finalize()
            // ipad ⊕ opad turns K ⊕ ipad into K ⊕ opad.
            for offset in 0..<hmacBlock { pad[offset] ^= 0x36 ^ 0x5C }
            var outer = SHA256()
            outer.update(bufferPointer: UnsafeRawBufferPointer(pad))
            innerDigest.withUnsafeBytes { outer.update(bufferPointer: $0) }
            return outer.finalize()
        }
    }

    /// The commitment this seal gives `value`: computed under the key, or the stored one once forgotten.
    public func commitment(of value: some Sequence<UInt8>) -> [UInt8] {
        if let key { return Self.commitment(key: key, value: value) }
        return commitment ?? []
    }

    /// This seal, forgotten for `reason`: the commitment of `value` replaces the key. A seal already forgotten
    /// keeps its commitment and first reason.
    public func forgetting(_ value: some Sequence<UInt8>, reason: String) -> Seal {
        guard key != nil else { return self }
        return Seal(commitment: commitment(of: value), forgotten: reason)
    }
}

/// One value of an event that is sealed, in the order ``LedgerEvent/Body/sealedValues`` lists them.
public enum SealedValue: Sendable, Equatable {
    /// A registration token.
    case token(RegistrationToken)
    /// An APNs device token.
    case apnsToken(APNsDeviceToken)
    /// A send's content, its message JSON.
    case content([UInt8])

    /// The bytes the commitment is taken over: the token's UTF-8, the APNs token's bytes, the JSON.
    public var bytes: [UInt8] {
        switch self {
        case .token(let token): Array(token.rawValue.utf8)
        case .apnsToken(let token): token.bytes
        case .content(let json): json
        }
    }

    /// This value's place taken by `commitment` in the hashed form: a string field holds its 64 lowercase hex
    /// digits, a bytes field its 32 bytes.
    func standingFor(commitment: [UInt8]) -> SealedValue {
        switch self {
        case .token: .token(RegistrationToken(trusted: Hex.encode(commitment)))
        // 32 bytes is within an APNs token's 16…200, so this cannot fail; the value is kept if it somehow did.
        case .apnsToken(let token): .apnsToken((try? APNsDeviceToken(bytes: commitment, sandbox: token.sandbox)) ?? token)
        case .content: .content(commitment)
        }
    }
}

extension LedgerEvent.Body {
    /// The sealed values of the body, in a fixed order per kind (docs/event-format.md, "Sealed fields"):
    /// the registration token of every kind that names one; then, for `apns_token_set`, the APNs token; for
    /// `sent`, the target when it is a token, then the message JSON; for `push_progress`, `through_token` when
    /// set, then each failure's token; for `live_activity_followed` and `push_to_start_token_set`, the push token
    /// (as an APNs token). `audience`, `erased` and `live_activities_ended` have none.
    public var sealedValues: [SealedValue] {
        switch self {
        case .registered(let token, _, _), .unregistered(let token, _), .subscribed(let token, _, _),
            .unsubscribed(let token, _, _), .acknowledged(let token, _), .apnsTokenCleared(let token, _),
            .liveActivityUnfollowed(let token, _, _):
            [.token(token)]
        case .apnsTokenSet(let token, let apnsToken), .liveActivityFollowed(let token, _, let apnsToken),
            .pushToStartTokenSet(let token, _, let apnsToken):
            [.token(token), .apnsToken(apnsToken)]
        case .sent(let sent):
            if case .token(let token) = sent.target { [.token(token), .content(sent.messageJSON)] } else {
                [.content(sent.messageJSON)]
            }
        case .pushProgress(let progress):
            (progress.throughToken.map { [SealedValue.token($0)] } ?? []) + progress.failures.map { .token($0.token) }
        case .audience, .erased, .retention, .liveActivityChannelCreated, .liveActivityChannelDeleted,
            .liveActivitiesEnded:
            []
        }
    }

    /// How many sealed values the body has (``sealedValues``' count, without building them).
    public var sealedValueCount: Int {
        switch self {
        case .registered, .unregistered, .subscribed, .unsubscribed, .acknowledged, .apnsTokenCleared,
            .liveActivityUnfollowed:
            1
        case .apnsTokenSet, .liveActivityFollowed, .pushToStartTokenSet: 2
        case .sent(let sent): if case .token = sent.target { 2 } else { 1 }
        case .pushProgress(let progress): (progress.throughToken == nil ? 0 : 1) + progress.failures.count
        case .audience, .erased, .retention, .liveActivityChannelCreated, .liveActivityChannelDeleted,
            .liveActivitiesEnded:
            0
        }
    }

    /// The body with its sealed values replaced, in ``sealedValues``' order, by `replace(index, value)`.
    /// A replacement of another case than the value's is ignored.
    public func replacingSealedValues(_ replace: (Int, SealedValue) -> SealedValue) -> LedgerEvent.Body {
        func token(_ index: Int, _ token: RegistrationToken) -> RegistrationToken {
            if case .token(let new) = replace(index, .token(token)) { return new }
            return token
        }
        switch self {
        case .registered(let value, let platform, let appID):
            return .registered(token: token(0, value), platform: platform, appID: appID)
        case .unregistered(let value, let reason): return .unregistered(token: token(0, value), reason: reason)
        case .subscribed(let value, let topic, let via): return .subscribed(token: token(0, value), topic: topic, via: via)
        case .unsubscribed(let value, let topic, let via):
            return .unsubscribed(token: token(0, value), topic: topic, via: via)
        case .acknowledged(let value, let through): return .acknowledged(token: token(0, value), through: through)
        case .apnsTokenCleared(let value, let reason): return .apnsTokenCleared(token: token(0, value), reason: reason)
        case .apnsTokenSet(let value, let apnsToken):
            var newAPNs = apnsToken
            if case .apnsToken(let new) = replace(1, .apnsToken(apnsToken)) { newAPNs = new }
            return .apnsTokenSet(token: token(0, value), apnsToken: newAPNs)
        case .liveActivityUnfollowed(let value, let topic, let reason):
            return .liveActivityUnfollowed(token: token(0, value), topic: topic, reason: reason)
        case .liveActivityFollowed(let value, let topic, let pushToken):
            var newToken = pushToken
            if case .apnsToken(let new) = replace(1, .apnsToken(pushToken)) { newToken = new }
            return .liveActivityFollowed(token: token(0, value), topic: topic, pushToken: newToken)
        case .pushToStartTokenSet(let value, let attributesType, let pushToken):
            var newToken = pushToken
            if case .apnsToken(let new) = replace(1, .apnsToken(pushToken)) { newToken = new }
            return .pushToStartTokenSet(token: token(0, value), attributesType: attributesType, pushToken: newToken)
        case .sent(var sent):
            var index = 0
            if case .token(let value) = sent.target {
                sent.target = .token(token(0, value))
                index = 1
            }
            if case .content(let json) = replace(index, .content(sent.messageJSON)) { sent.messageJSON = json }
            return .sent(sent)
        case .pushProgress(var progress):
            var index = 0
            if let through = progress.throughToken {
                progress.throughToken = token(0, through)
                index = 1
            }
            for position in progress.failures.indices {
                progress.failures[position].token = token(index, progress.failures[position].token)
                index += 1
            }
            return .pushProgress(progress)
        case .audience, .erased, .retention, .liveActivityChannelCreated, .liveActivityChannelDeleted,
            .liveActivitiesEnded:
            return self
        }
    }
}

extension LedgerEvent {
    /// For a send whose content was forgotten, why: "erasure", or "retention at <time>"; `nil` while it is held (or
    /// for a send written before the ledger sealed).
    public var contentForgotten: String? {
        guard case .sent = body, let seal = seals?.last, seal.isForgotten else { return nil }
        return seal.forgotten.isEmpty ? "forgotten" : seal.forgotten
    }

    /// This event's seals once its body is rewritten to `rewritten`: each sealed value that changed is forgotten for
    /// `reason` (its key replaced by the commitment of the value it had); `nil` for an event without seals, or a
    /// rewrite with other sealed values than the event's.
    public func seals(forgettingChangesIn rewritten: LedgerEvent.Body, reason: String) -> [Seal]? {
        guard let seals else { return nil }
        let before = body.sealedValues
        let after = rewritten.sealedValues
        guard before.count == seals.count, after.count == seals.count else { return nil }
        return seals.indices.map { index in
            before[index] == after[index] ? seals[index] : seals[index].forgetting(before[index].bytes, reason: reason)
        }
    }

    /// The event as its hash sees it: every sealed value replaced by its commitment (``SealedValue``), and no
    /// seals. `nil` for an event that is not sealed, or whose seals do not match its sealed values.
    public var hashedView: LedgerEvent? {
        guard let seals, body.sealedValueCount == seals.count else { return nil }
        var view = self
        view.seals = nil
        view.body = body.replacingSealedValues { index, value in
            value.standingFor(commitment: seals[index].commitment(of: value.bytes))
        }
        return view
    }
}

/// Where a writer's seal keys come from: the kernel's random numbers; in tests that compare two ledgers byte for
/// byte, keys derived from a seed and the place they are made for (the event's seq and the sealed value's index), so
/// that both ledgers make the same keys however their events were batched or retried.
public final class SealKeySource: Sendable {
    private let seed: UInt64?

    /// The kernel's random numbers (``Seal/newKey()``).
    public static let system = SealKeySource(seed: nil)

    private init(seed: UInt64?) { self.seed = seed }

    /// Keys derived from `seed`: only for tests, since such keys hide nothing.
    package convenience init(seed: UInt64) { self.init(seed: Optional(seed)) }

    /// A key for the sealed value at `index` of the event at `seq`.
    public func newKey(seq: UInt64, index: Int) -> [UInt8] {
        guard let seed else { return Seal.newKey() }
        var hasher = SHA256()
        for word in [seed, seq, UInt64(index)] { withUnsafeBytes(of: word.bigEndian) { hasher.update(bufferPointer: $0) } }
        return Array(hasher.finalize())
    }
}
