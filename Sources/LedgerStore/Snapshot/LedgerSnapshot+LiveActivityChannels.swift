import LMDBKit
import LedgerCore

extension LedgerSnapshot {
    /// The topic's iOS 18 broadcast channel now (`nil`: none).
    public func liveActivityChannel(of topic: TopicName) throws -> LiveActivityChannel? {
        try LiveActivityChannelRecord.current(of: topic, txn: txn, schema: schema)
    }

    /// Every topic's broadcast channel now, by topic name.
    public func liveActivityChannels() throws -> [LiveActivityChannel] {
        try LiveActivityChannelRecord.all(txn: txn, schema: schema).sorted { $0.topic.rawValue < $1.topic.rawValue }
    }

    /// How many topics have a broadcast channel now (Apple allows 10,000 per app and environment).
    public func liveActivityChannelCount() throws -> Int {
        try txn.count(schema.liveActivityChannels)
    }
}
