/// Gives an event its seals as it is appended (``Seal``): each registration token and APNs token under its
/// device's key, and a send's content under a key of its own.
///
/// A device's key is the one its projection keeps (``LedgerProjection/sealKey(of:)``); a device without one — new,
/// or registered before the ledger sealed its fields — gets a fresh key here, which ``EventFold`` keeps when it
/// folds the event, so that every later event naming the device reuses it. A pseudonym (a device erased while its
/// pushes were under way) is sealed under a key of its own: an erased device keeps no key.
public enum EventSealer {
    /// The seals of `body`, the event at `seq`, one per ``LedgerEvent/Body/sealedValues`` in order.
    public static func seals<State: LedgerProjection>(
        for body: LedgerEvent.Body, seq: UInt64, in state: inout State, keys: SealKeySource = .system
    ) throws -> [Seal] {
        var seals: [Seal] = []
        seals.reserveCapacity(body.sealedValueCount)
        /// Keys made for this event, for a device named twice (a push progress's through token and failure).
        var made: [RegistrationToken: [UInt8]] = [:]
        var deviceKey: [UInt8]?
        for (index, value) in body.sealedValues.enumerated() {
            switch value {
            case .token(let token):
                let key = try key(of: token, in: &state, made: &made) { keys.newKey(seq: seq, index: index) }
                deviceKey = key
                seals.append(Seal(key: key))
            case .apnsToken:
                // Always after the registration token it belongs to (``LedgerEvent/Body/sealedValues``).
                seals.append(Seal(key: deviceKey ?? keys.newKey(seq: seq, index: index)))
            case .content:
                seals.append(Seal(key: keys.newKey(seq: seq, index: index)))
            }
        }
        return seals
    }

    private static func key<State: LedgerProjection>(
        of token: RegistrationToken, in state: inout State, made: inout [RegistrationToken: [UInt8]],
        newKey: () -> [UInt8]
    ) throws -> [UInt8] {
        if !Erasure.isPseudonym(token), let instance = try state.instanceID(for: token),
            let key = try state.sealKey(of: instance)
        {
            return key
        }
        if let key = made[token] { return key }
        let key = newKey()
        made[token] = key
        return key
    }
}
