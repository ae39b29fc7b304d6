import LedgerStore
import Foundation
import Synchronization
import LedgerCore
import FCMWire

extension LedgerSnapshot {
    /// The device's inbox — a pure function of the log: the sends after `cursor` whose audience (the state at
    /// their own seq) contains `instance`, oldest first, without those expired at `now`, at most `limit`.
    ///
    /// Reads the `sends` index from the cursor (never before the instance's first registration, nor before
    /// the longest lifetime a message can have), and no further than `through` (a cluster's leader reads no send
    /// etcd has not acknowledged: ``Ledger/acknowledgedSeq``). Each send's audience is computed once from the temporal
    /// index and kept in `sends` (shared by every device of the project: a send to a topic with a thousand
    /// streaming devices is decoded and evaluated once, not a thousand times).
    ///
    /// A send whose content is forgotten (by an erasure or a retention sweep), or sent before `sentSince` (the
    /// project's `contentRetention` ago), is not delivered: the cursor moves past it, as past an expired one.
    public func inbox(
        of instance: InstanceID, after cursor: UInt64, now: LedgerTime, limit: Int, sends cache: SendCache,
        through bound: UInt64 = .max, sentSince: LedgerTime? = nil
    ) throws -> InboxPage {
        guard let info = try self.instance(instance), let firstRegistration = try firstRegistration(of: instance)
        else { return InboxPage(messages: [], through: cursor) }
        // The cursor comes from the device: a cursor past the log (up to UInt64.max) has nothing after it.
        let end = min(bound, try head().seq)
        guard cursor < end else { return InboxPage(messages: [], through: cursor) }
        var from = max(cursor, firstRegistration > 0 ? firstRegistration - 1 : 0) + 1
        // A device back after a long time: skip what has expired for everyone (one binary search, only then).
        // The first send's time comes from the cache when it is there, as it is for a streaming device.
        if let first = try sendSeqs(from: from, limit: 1).first,
            let sentAt = try cache.cached(at: first)?.time ?? event(at: first)?.time,
            now.microseconds.addingClamped(-defaultMessageLifetime) > sentAt.microseconds
        {
            let oldestLive = try seq(
                atOrBefore: LedgerTime(microseconds: now.microseconds.addingClamped(-defaultMessageLifetime)))
            from = max(from, oldestLive + 1)
        }
        let platform = DevicePlatform(registered: info.platform)
        var messages: [InboxMessage] = []
        var through = cursor
        try forEachSendBatch(from: from, through: end) { batch in
            for seq in batch where messages.count < limit {
                through = max(through, seq)
                let send = try cache.send(at: seq, in: self)
                guard send.audience.contains(instance) else { continue }
                let expires = send.expiry(platform: info.platform)
                guard now < expires, !send.contentForgotten, sentSince.map({ send.time >= $0 }) ?? true else {
                    continue
                }
                let delivery = send.delivery(for: platform)
                messages.append(
                    InboxMessage(
                        cursor: seq, messageID: send.sent.messageID, sentTime: send.time, target: send.sent.target,
                        messageJSON: send.sent.messageJSON, payloadJSON: delivery.payloadJSON, expires: expires,
                        collapseKey: delivery.collapseKey, priority: delivery.priority, pushType: delivery.pushType,
                        platform: delivery.platform))
            }
            return messages.count < limit
        }
        try dropCollapsed(
            &messages, of: instance, info: info, platform: platform, after: through, end: end, now: now, sends: cache)
        return InboxPage(messages: messages, through: through)
    }

    /// Removes each message with a collapse key for which a newer message with the same key awaits the device
    /// — later in `messages` or among the sends after `through` (read to `end`: only when a message of the
    /// page has a key). The cursor still moves past the removed ones: they are replaced, not pending.
    private func dropCollapsed(
        _ messages: inout [InboxMessage], of instance: InstanceID, info: InstanceInfo, platform: DevicePlatform,
        after through: UInt64, end: UInt64, now: LedgerTime, sends cache: SendCache
    ) throws {
        var newest: [String: UInt64] = [:]
        for message in messages {
            if let key = message.collapseKey { newest[key] = max(newest[key] ?? 0, message.cursor) }
        }
        guard !newest.isEmpty else { return }
        try forEachSendBatch(from: through + 1, through: end) { batch in
            for seq in batch {
                let send = try cache.send(at: seq, in: self)
                guard let key = send.delivery(for: platform).collapseKey, newest[key] != nil,
                    send.audience.contains(instance), now < send.expiry(platform: info.platform)
                else { continue }
                newest[key] = seq
            }
            return true
        }
        messages.removeAll { message in message.collapseKey.map { newest[$0] ?? 0 > message.cursor } ?? false }
    }

    /// Calls `body` with the seqs of the sends from `start` through `end`, up to 512 at a time (each batch read
    /// in a cursor pass of its own, so that `body` may read the log), until it returns `false` or they end.
    private func forEachSendBatch(from start: UInt64, through end: UInt64, _ body: ([UInt64]) throws -> Bool)
        throws
    {
        var from = start
        while from <= end {
            let batch = try sendSeqs(from: from, through: end, limit: 512)
            guard let last = batch.last else { return }
            guard try body(batch), last < UInt64.max else { return }
            from = last + 1
        }
    }

    /// The seq of the instance's first registration, if it was ever registered.
    func firstRegistration(of instance: InstanceID) throws -> UInt64? {
        var first = try registeredSince(instance)
        for interval in try closedRegistrations(of: instance) { first = min(first ?? .max, interval.start) }
        return first
    }
}
