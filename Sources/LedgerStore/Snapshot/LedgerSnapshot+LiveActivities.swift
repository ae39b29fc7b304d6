import LMDBKit
import LedgerCore

extension LedgerSnapshot {
    /// The ActivityKit token `instance` held for `scope` after applying event `seq` (a send's: the token its push
    /// goes to).
    public func liveActivityToken(of instance: InstanceID, scope: LiveActivityScope, at seq: UInt64) throws
        -> APNsDeviceToken?
    {
        try LiveActivityTokenRecord.token(of: instance, scope: scope, at: seq, txn: txn, schema: schema)
    }

    /// The ActivityKit token `instance` holds for `scope` now.
    public func liveActivityToken(of instance: InstanceID, scope: LiveActivityScope) throws -> APNsDeviceToken? {
        try LiveActivityTokenRecord.current(of: instance, scope: scope, txn: txn, schema: schema)?.token
    }

    /// Every ActivityKit token `instance` holds or held, each with its scope and the seqs it was held over.
    public func liveActivityTokens(of instance: InstanceID) throws -> [HeldLiveActivityToken] {
        try LiveActivityTokenRecord.history(of: instance, txn: txn, schema: schema)
    }

    /// The instances that follow `topic`'s Live Activity now, in instance order.
    public func liveActivityFollowers(of topic: TopicID) throws -> [InstanceID] {
        try LiveActivityTokenRecord.followers(of: topic, txn: txn, schema: schema)
    }
}
