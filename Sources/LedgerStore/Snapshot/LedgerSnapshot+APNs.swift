import LedgerCore

extension LedgerSnapshot {
    /// The APNs device token `token`'s instance holds now (`nil`: never registered, or none held).
    public func apnsToken(of token: RegistrationToken) throws -> APNsDeviceToken? {
        guard let instance = try instanceID(of: token) else { return nil }
        return try APNsTokenRecord.current(of: instance, txn: txn, schema: schema)?.token
    }

    /// The APNs device token `instance` held after applying event `seq`.
    public func apnsToken(of instance: InstanceID, at seq: UInt64) throws -> APNsDeviceToken? {
        try APNsTokenRecord.token(of: instance, at: seq, txn: txn, schema: schema)
    }
}

extension LedgerSnapshot {
    /// The APNs device token `instance` holds now, with the time it was set.
    public func apnsTokenHeld(by instance: InstanceID) throws -> (token: APNsDeviceToken, since: LedgerTime)? {
        guard let current = try APNsTokenRecord.current(of: instance, txn: txn, schema: schema) else { return nil }
        guard let event = try event(at: current.since) else {
            throw StoreError(.corrupt, "the APNs token of instance \(instance) was set by a missing event")
        }
        return (current.token, event.time)
    }
}
