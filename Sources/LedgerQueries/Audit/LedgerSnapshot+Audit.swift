import LedgerStore
import LedgerCore

extension LedgerSnapshot {
    /// The history of the instance holding `token` and its state at `seq` (now, when `nil`), or `nil` when
    /// the token was never registered.
    public func instanceAudit(_ token: RegistrationToken, at seq: UInt64? = nil) throws -> InstanceAudit? {
        guard let instance = try instanceID(of: token), let info = try self.instance(instance) else { return nil }
        let at = try seq ?? head().seq
        var registrations = try closedRegistrations(of: instance)
        if let since = info.registeredSince { registrations.append(HeldInterval(start: since, end: nil)) }
        var subscriptions: [(topic: TopicID, interval: HeldInterval)] = []
        try forEachCurrentTopic(of: instance) { topic, since in
            subscriptions.append((topic, HeldInterval(start: since, end: nil)))
        }
        try forEachEndedTopic(of: instance) { subscriptions.append(($0, $1)) }
        var names: [TopicID: TopicName] = [:]
        for (topic, _) in subscriptions where names[topic] == nil { names[topic] = try topicName(of: topic) }
        let named = try subscriptions.map { subscription in
            guard let name = names[subscription.topic] else {
                throw StoreError(.corrupt, "topic \(subscription.topic) has no name")
            }
            return (topic: name, interval: subscription.interval)
        }.sorted {
            ($0.interval.start, $0.topic.rawValue) < ($1.interval.start, $1.topic.rawValue)
        }
        let acknowledgedThrough = try self.acknowledgedThrough(instance)
        return InstanceAudit(
            token: token, instance: instance, platform: info.platform, appID: info.appID,
            registrations: registrations, subscriptions: named, at: at,
            registeredAt: registrations.contains { $0.contains(at) },
            topicsAt: named.filter { $0.interval.contains(at) }.map(\.topic).sorted { $0.rawValue < $1.rawValue },
            deliveries: try deliveries(
                to: token, instance: instance, registrations: registrations, subscriptions: named, through: at,
                acknowledgedThrough: acknowledgedThrough),
            apnsTokens: try apnsTokenHistory(of: instance),
            acknowledgedThrough: acknowledgedThrough)
    }

    /// The sends up to `through` that reached the instance: each send in a registration is decoded and its
    /// target evaluated against the instance's own topics at the send's seq — the same state
    /// ``audience(of:precedence:at:)`` computes for every instance at once (the tests compare the two).
    /// O(sends while registered), never the whole log.
    private func deliveries(
        to token: RegistrationToken, instance: InstanceID, registrations: [HeldInterval],
        subscriptions: [(topic: TopicName, interval: HeldInterval)], through: UInt64, acknowledgedThrough: UInt64
    ) throws -> [InstanceDelivery] {
        var deliveries: [InstanceDelivery] = []
        var conditions: [String: Condition] = [:]
        let pushes = try holdsAPNsTokens()
        let now = LedgerTime.now()
        for registration in registrations.sorted(by: { $0.start < $1.start }) where registration.start <= through {
            let last = min(through, (registration.end ?? .max) - 1)
            for seq in try sendSeqs(from: registration.start, through: last) {
                let (event, sent) = try sentEvent(at: seq)
                let topics = Set(subscriptions.filter { $0.interval.contains(seq) }.map(\.topic))
                let reached: Bool
                switch sent.target {
                case .topic(let topic): reached = topics.contains(topic)
                case .token(let target): reached = target == token
                case .condition(let text):
                    let key = "\(sent.precedence.rawValue) \(text)"
                    if conditions[key] == nil {
                        conditions[key] = try Condition(parsing: text, precedence: sent.precedence)
                    }
                    reached = conditions[key]?.isSatisfied(byTopics: topics) ?? false
                }
                guard reached else { continue }
                var push: PushStatus?
                if pushes, try apnsToken(of: instance, at: seq) != nil {
                    let sendPushes = try self.pushes(
                        ofSendAt: seq, messageID: sent.messageID, expiresAt: sent.iosExpiry(sentAt: event.time),
                        now: now, destination: sent.apnsDestination)
                    push = try pushStatus(of: instance, token: token, in: sendPushes)
                }
                deliveries.append(
                    InstanceDelivery(
                        messageID: sent.messageID, seq: seq, time: event.time, target: sent.target,
                        acknowledged: seq <= acknowledgedThrough, push: push))
            }
        }
        return deliveries
    }

    /// `topic`'s subscribers at `seq` (now, when `nil`), with its count history, or `nil` when the topic
    /// never had a subscriber.
    public func topicAudit(_ topic: TopicName, at seq: UInt64? = nil, members includeMembers: Bool) throws
        -> TopicAudit?
    {
        guard let id = try topicID(of: topic) else { return nil }
        let at = try seq ?? head().seq
        var changes: [(seq: UInt64, delta: Int)] = []
        try forEachMembership(of: id) { _, interval in
            changes.append((interval.start, 1))
            if let end = interval.end { changes.append((end, -1)) }
        }
        changes.sort { $0.seq < $1.seq }
        var history: [(seq: UInt64, count: Int)] = []
        var count = 0
        for change in changes {
            count += change.delta
            // One entry per event: an unregistration closes one interval of this topic, a batch several events.
            if history.last?.seq == change.seq {
                history[history.count - 1].count = count
            } else {
                history.append((change.seq, count))
            }
        }
        let members = try memberSet(of: id, at: at, capacity: try instanceIDBound())
        return TopicAudit(
            topic: topic, at: at, subscriberCount: members.count,
            members: includeMembers ? try recipientTokens(members) : nil, history: history)
    }
}
