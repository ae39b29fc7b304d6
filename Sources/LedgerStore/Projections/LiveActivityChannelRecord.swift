import LMDBKit
import LedgerCore

/// How `liveActivityChannels` stores each topic's broadcast channel (``LedgerSchema``): under the topic's
/// ``NameKey``, `created seq u64 ‖ message storage policy u8 ‖ channel id length u16 ‖ channel id ‖ topic name`
/// (the name too, since a long one's key is its hash and the list names every topic).
enum LiveActivityChannelRecord {
    static func value(_ channel: LiveActivityChannel) -> [UInt8] {
        let id = Array(channel.channelID.utf8)
        let topic = Array(channel.topic.rawValue.utf8)
        var bytes = ByteWriter(capacity: 11 + id.count + topic.count)
        bytes.append(channel.createdSeq)
        bytes.bytes.append(UInt8(truncatingIfNeeded: channel.messageStoragePolicy))
        bytes.bytes.append(UInt8(truncatingIfNeeded: id.count >> 8))
        bytes.bytes.append(UInt8(truncatingIfNeeded: id.count))
        bytes.append(id)
        bytes.append(topic)
        return bytes.bytes
    }

    /// Reads a value.
    ///
    /// - Throws: `StoreError.corrupt` for a value of another shape (a damaged file).
    static func decode(_ value: UnsafeRawBufferPointer) throws -> LiveActivityChannel {
        guard value.count >= 11 else { throw StoreError(.corrupt, "a broadcast channel entry has \(value.count) bytes") }
        let idCount = Int(value[9]) << 8 | Int(value[10])
        guard value.count >= 11 + idCount, value[8] <= 1,
            let id = String(validating: value[11..<(11 + idCount)], as: UTF8.self),
            let topic = String(validating: value[(11 + idCount)...], as: UTF8.self)
        else { throw StoreError(.corrupt, "a broadcast channel entry is malformed") }
        return LiveActivityChannel(
            topic: TopicName(trusted: topic), channelID: id, messageStoragePolicy: UInt32(value[8]),
            createdSeq: value.loadBigEndianUInt64(at: 0))
    }

    /// The topic's channel now, if any.
    static func current(of topic: TopicName, txn: LMDBTransaction, schema: LedgerSchema) throws -> LiveActivityChannel? {
        try txn.withValue(in: schema.liveActivityChannels, forKey: NameKey(topic.rawValue)) { value in
            try value.map(decode)
        }
    }

    /// Sets or removes the topic's channel.
    static func set(
        _ channel: LiveActivityChannel?, for topic: TopicName, txn: LMDBTransaction, schema: LedgerSchema
    ) throws {
        if let channel {
            try txn.put(schema.liveActivityChannels, key: NameKey(topic.rawValue), value: value(channel))
        } else {
            try txn.delete(schema.liveActivityChannels, key: NameKey(topic.rawValue))
        }
    }

    /// Every topic's channel, in key order.
    static func all(txn: LMDBTransaction, schema: LedgerSchema) throws -> [LiveActivityChannel] {
        var channels: [LiveActivityChannel] = []
        try txn.withCursor(schema.liveActivityChannels) { cursor in
            try cursor.forEach { entry in
                channels.append(try decode(entry.value))
                return true
            }
        }
        return channels
    }
}
