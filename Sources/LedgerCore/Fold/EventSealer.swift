/// Gives an event its seals as it is appended (``Seal``): a fresh random key for each sealed value.
///
/// A key per value, not per device: the keys are stored beside their values in the records, so a key shared by a
/// device's records would let whoever kept one record from before an erasure (a proof bundle, a backup) compute the
/// commitment every one of them keeps after it, and re-link the device's whole history. With a key per value, a
/// copy of a record opens that record's commitment alone. (Deleting a shared key would forget nothing either: an
/// erasure rewrites every record that holds it.)
public enum EventSealer {
    /// The seals of `body`, the event at `seq`, one per ``LedgerEvent/Body/sealedValues`` in order.
    public static func seals(for body: LedgerEvent.Body, seq: UInt64, keys: SealKeySource = .system) -> [Seal] {
        (0..<body.sealedValueCount).map { Seal(key: keys.newKey(seq: seq, index: $0)) }
    }
}
