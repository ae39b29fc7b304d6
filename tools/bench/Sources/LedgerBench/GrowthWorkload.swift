import FCMWire
import Foundation
import LMDBKit
import LedgerCore
import LedgerServer
import LedgerStore
import Synchronization

/// How `data.mdb` grows under a steady workload a user would recognise, through simulated days, once with
/// `contentRetention` "never" and once with it set: bytes a day, and the first day's size.
///
/// Real: the store. Every event is appended through ``Ledger/append(_:)`` (group commit, sealing, projections, Merkle
/// tree, the audience recorder), and the retention sweep makes the server's requests (``RetentionSweeper``:
/// ``LedgerOperation/forgetContents(before:limit:)`` of at most 5,000 sends, ten a sweep, each compacting the file),
/// but once a simulated day, at its end, where the server sweeps every hour: a compaction of this file takes seconds
/// here (it grows to gigabytes), and 24 a day would make the run hours long; what is forgotten by the day's end is
/// the same.
///
/// Simulated: the clock (``Ledger/Options/clock``), and the requests the HTTP routes and the APNs outbox would make,
/// built as they build them (the same operations, actors and request-id lengths, 157-character tokens from
/// ``RegistrationToken/issue()``, message JSON from ``MessageValidation``). Nothing is pushed: the outbox's
/// `pushProgress` events are appended as `ProjectPusher` appends them (one per 1,000 recipients walked and one at
/// the end; APNs' 410 for an uninstalled app with the registration's end in the same request).
///
/// The workload (the same seed gives both runs the same one): at the start, `devices` devices (40 % iOS with an
/// APNs token), each on 3 of 50 topics; then every simulated day:
/// - churn: 1 % of the devices leave (Android ones unregister; iOS ones are uninstalled and end at their next push's
///   410), as many new ones register and subscribe; 1 % move one subscription to another topic;
/// - 50 sends of about 1 KB of message JSON, spread over the day: 45 to a topic (about 12,000 recipients each),
///   5 to a single device; each gets its `audience` event and its APNs progress;
/// - half of each send's recipients acknowledge it (one `acknowledged` event each).
/// Requests of the same kind are batched (an event's bytes do not depend on its request's size: each carries its
/// request id).
struct GrowthWorkload {
    let devices: Int
    let days: Int
    /// The `contentRetention` of the second run.
    let contentRetentionDays: Int
    let seed: UInt64
    let scratch: String

    static let topics = 50
    static let topicsPerDevice = 3
    static let iosShare = 0.4
    static let topicSendsPerDay = 45
    static let tokenSendsPerDay = 5
    static let messageBytes = 1024
    /// Devices leaving (and as many joining), and devices moving one subscription, a day, of `devices`.
    static let churnShare = 0.01
    static let acknowledgingShare = 0.5
    /// ``RetentionSweeper``'s limits.
    static let sweepBatch = 5000
    static let sweepRequests = 10
    /// `ProjectPusher.progressBatch`.
    static let progressBatch = 1000
    /// 2027-01-04T00:00:00Z, a Monday.
    static let start = LedgerTime(microseconds: 1_799_020_800 * 1_000_000)

    func run() async throws -> [BenchResult] {
        let never = try await simulate(contentRetention: nil)
        let retained = try await simulate(contentRetention: contentRetentionDays)
        // The steady state: after the second run has passed its period and swept for a day.
        let from = days >= contentRetentionDays + 4 ? contentRetentionDays + 2 : min(2, days)
        let neverSlope = never.slope(from: from, \.fileBytes)
        let retainedSlope = retained.slope(from: from, \.fileBytes)
        func megabytes(_ bytes: Double) -> String { String(format: "%.1f", bytes / 1e6) }
        func series(_ run: Run) -> String { run.days.map { megabytes(Double($0.fileBytes)) }.joined(separator: " ") }
        func compacted(_ run: Run) -> String {
            "compacted copy \(megabytes(Double(run.days[0].compactedBytes ?? 0))) MB after day 1, "
                + "\(megabytes(Double(run.days[days - 1].compactedBytes ?? 0))) MB after day \(days)"
        }
        let workload =
            "\(devices) devices, \(days) simulated days, slope from day \(from) to \(days) (least squares)"
        return [
            BenchResult(
                name: "data.mdb growth a day, contentRetention never", unit: "MB/day", value: neverSlope / 1e6,
                baselineName: "data.mdb after the first day", baseline: Double(never.days[0].fileBytes) / 1e6,
                notes: "\(workload); \(compacted(never)); "
                    + "\(never.events(from: from)) events/day; \(never.breakdown); "
                    + "\(String(format: "%.0f", never.seconds)) s; daily MB: \(series(never))"),
            BenchResult(
                name: "data.mdb growth a day, contentRetention \(contentRetentionDays)d", unit: "MB/day",
                value: retainedSlope / 1e6, baselineName: "contentRetention never", baseline: neverSlope / 1e6,
                notes: "\(workload); \(compacted(retained)); "
                    + "first day \(megabytes(Double(retained.days[0].fileBytes))) MB; "
                    + "\(retained.compactions) sweeps that compacted; \(retained.breakdown); "
                    + "\(String(format: "%.0f", retained.seconds)) s; daily MB: \(series(retained))"),
        ]
    }

    /// One day's end.
    struct Day {
        /// `data.mdb`'s size (stat).
        var fileBytes: Int
        /// LMDB's pages up to the last one used.
        var usedBytes: Int
        /// A compacted copy of the ledger (`ledger backup`): the live pages (on the first and the last day).
        var compactedBytes: Int?
        var head: UInt64
    }

    /// One simulated run.
    struct Run {
        var days: [Day] = []
        var compactions = 0
        var seconds = 0.0
        /// Of the last day's log: each kind's events and record bytes.
        var kinds: [String: (events: Int, bytes: Int)] = [:]

        /// Least-squares bytes a day of `bytes`, over days `from` (1-based) to the last.
        func slope(from: Int, _ bytes: KeyPath<Day, Int>) -> Double {
            let points = days.enumerated().filter { $0.offset + 1 >= from }.map {
                (Double($0.offset + 1), Double($0.element[keyPath: bytes]))
            }
            guard points.count > 1 else { return 0 }
            let meanX = points.map(\.0).reduce(0, +) / Double(points.count)
            let meanY = points.map(\.1).reduce(0, +) / Double(points.count)
            let covariance = points.map { ($0.0 - meanX) * ($0.1 - meanY) }.reduce(0, +)
            return covariance / points.map { ($0.0 - meanX) * ($0.0 - meanX) }.reduce(0, +)
        }

        /// Events a day over days `from` to the last.
        func events(from: Int) -> Int {
            guard days.count > from else { return Int(days.last?.head ?? 0) }
            return Int((days[days.count - 1].head - days[from - 1].head) / UInt64(days.count - from))
        }

        /// The last day's log bytes by kind, largest first.
        var breakdown: String {
            let total = kinds.values.map(\.bytes).reduce(0, +)
            return "last day's log \(String(format: "%.1f", Double(total) / 1e6)) MB: "
                + kinds.sorted { $0.value.bytes > $1.value.bytes }.map { kind, value in
                    "\(kind) \(value.events) × \(value.bytes / max(1, value.events)) B"
                }.joined(separator: ", ")
        }
    }

    /// Runs the simulated days on a fresh ledger, swept for `contentRetention` days when given.
    func simulate(contentRetention: Int?) async throws -> Run {
        let clock = SimulatedClock(Self.start)
        var options = Ledger.Options()
        options.environment.mapSize = 1 << 34
        options.clock = { clock.now }
        let directory = LedgerBench.scratchDirectory(in: scratch, label: "growth")
        let ledger = try Ledger.open(dataDirectory: directory, project: .default, options: options, logger: silent)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        defer { ledger.close() }
        let label = contentRetention.map { "contentRetention \($0)d" } ?? "contentRetention never"
        var simulation = Simulation(
            ledger: ledger, clock: clock, generator: SplitMix(seed: seed), messages: try MessageBodies(),
            contentRetentionDays: contentRetention)
        var run = Run()
        let started = ContinuousClock.now
        try await simulation.populate(devices: devices)
        for day in 1...days {
            try await simulation.simulateDay(
                startingAt: Self.start.microseconds + Int64(day - 1) * 86_400_000_000, devices: devices)
            ledger.waitForAudiences()
            run.days.append(try measure(ledger, directory: directory, compacted: day == 1 || day == days))
            let last = run.days[run.days.count - 1]
            let compacted = last.compactedBytes.map { ", compacted copy \($0) B" } ?? ""
            let elapsed = String(format: "%.0f", (ContinuousClock.now - started).seconds)
            let line =
                "growth, \(label), day \(day): data.mdb \(last.fileBytes) B, used \(last.usedBytes) B\(compacted), "
                + "\(last.head) events, \(simulation.compactions) compactions, \(elapsed) s\n"
            FileHandle.standardError.write(Data(line.utf8))
        }
        run.seconds = (ContinuousClock.now - started).seconds
        run.compactions = simulation.compactions
        let firstOfLastDay = days > 1 ? run.days[days - 2].head + 1 : 1
        run.kinds = try ledger.readLog { snapshot in
            var kinds: [String: (events: Int, bytes: Int)] = [:]
            try snapshot.forEachEvent(from: firstOfLastDay) { event, _ in
                let bytes = EventCodec.encode(event).count + HashChain.hashSize
                kinds["\(event.kind)", default: (0, 0)].events += 1
                kinds["\(event.kind)", default: (0, 0)].bytes += bytes
                if case .audience(let record) = event.body, let expected = simulation.audiences[record.sendSeq],
                    expected != Int(record.recipientCount)
                {
                    throw BenchError(
                        "send \(record.sendSeq): \(record.recipientCount) recipients, expected \(expected)")
                }
                return true
            }
            return kinds
        }
        return run
    }

    /// `data.mdb` now: its size, LMDB's last used page, and when `compacted` a compacted copy's size.
    func measure(_ ledger: Ledger, directory: String, compacted: Bool) throws -> Day {
        let file = "/" + ProjectID.default.rawValue + "/data.mdb"
        var compactedBytes: Int?
        if compacted {
            let copy = LedgerBench.scratchDirectory(in: scratch, label: "growth-copy")
            defer { try? FileManager.default.removeItem(atPath: copy) }
            try ledger.backup(to: copy)
            compactedBytes = try fileSize(copy + file)
        }
        return Day(
            fileBytes: try fileSize(directory + file), usedBytes: ledger.environment.usedBytes,
            compactedBytes: compactedBytes, head: try ledger.readLog { try $0.head().seq })
    }

    func fileSize(_ path: String) throws -> Int {
        guard let size = try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int else {
            throw BenchError("no size for \(path)")
        }
        return size
    }
}

/// The devices as the workload knows them, in the order of their first registration (the ledger's instance order,
/// in which the APNs outbox walks an audience).
private struct Population {
    enum State: UInt8 {
        case registered
        /// An iOS app removed from its device: still registered, until a push meets APNs' 410.
        case uninstalled
        case ended
    }

    var tokens: [RegistrationToken] = []
    var ios: [Bool] = []
    var states: [State] = []
    /// ``GrowthWorkload/topicsPerDevice`` topic numbers per device.
    var topics: [UInt8] = []

    var count: Int { tokens.count }

    func isOn(_ device: Int, topic: UInt8) -> Bool {
        let start = device * GrowthWorkload.topicsPerDevice
        return topics[start..<start + GrowthWorkload.topicsPerDevice].contains(topic)
    }

    /// The devices registered now that are on `topic`, in instance order.
    func recipients(of topic: UInt8) -> [Int] {
        (0..<count).filter { states[$0] != .ended && isOn($0, topic: topic) }
    }

    /// A device registered and installed, not in `excluded`.
    func randomActive(excluding excluded: Set<Int>, using generator: inout SplitMix) -> Int {
        while true {
            let device = Int.random(in: 0..<count, using: &generator)
            if states[device] == .registered && !excluded.contains(device) { return device }
        }
    }
}

/// One run's state: the ledger, the simulated clock, the devices, and what the outbox has settled.
private struct Simulation {
    let ledger: Ledger
    let clock: SimulatedClock
    var generator: SplitMix
    let messages: MessageBodies
    /// The `contentRetention` swept for, in days (`nil`: never).
    let contentRetentionDays: Int?
    var population = Population()
    /// The sweeps' requests that forgot something, each followed by a compaction.
    var compactions = 0
    /// The last send whose pushes all finished (`PushProgress.settledThrough`).
    var settled: UInt64 = 0
    var story = 0
    /// Each send's recipients as this model counts them, checked against the recorded `audience` events.
    var audiences: [UInt64: Int] = [:]

    mutating func append(actor: String, _ operations: [LedgerOperation]) async throws -> WriteReceipt {
        // Request ids as the routes make them, from the system's generator: drawn from `generator`, the sweeps' would
        // make the two runs' workloads differ.
        let receipt = try await ledger.append(
            WriteRequest(actor: actor, requestID: RequestID.random(), operations: operations))
        if let rejection = receipt.outcomes.lazy.compactMap(\.rejection).first {
            throw BenchError("the growth workload's request was refused: \(rejection)")
        }
        return receipt
    }

    /// A new device's registration (as `POST …/registrations` makes it: with its APNs token on iOS) and its
    /// subscriptions (as the device makes them, `via: client`).
    mutating func join() throws -> (register: [LedgerOperation], subscribe: [LedgerOperation]) {
        let token = RegistrationToken.issue()
        let ios = Double.random(in: 0..<1, using: &generator) < GrowthWorkload.iosShare
        var register: [LedgerOperation] = [
            .register(token, platform: ios ? "ios" : "android", appID: "com.example.news")
        ]
        if ios {
            let bytes = (0..<4).flatMap { _ in withUnsafeBytes(of: generator.next()) { Array($0) } }
            register.append(.setAPNsToken(token, try APNsDeviceToken(bytes: bytes, sandbox: false)))
        }
        var chosen: [UInt8] = []
        while chosen.count < GrowthWorkload.topicsPerDevice {
            let topic = UInt8.random(in: 0..<UInt8(GrowthWorkload.topics), using: &generator)
            if !chosen.contains(topic) { chosen.append(topic) }
        }
        population.tokens.append(token)
        population.ios.append(ios)
        population.states.append(.registered)
        population.topics += chosen
        return (register, chosen.map { .subscribe(token, messages.topics[Int($0)], via: .client) })
    }

    /// The devices at the start, registered and subscribed in requests of 1,000 devices.
    mutating func populate(devices: Int) async throws {
        for start in stride(from: 0, to: devices, by: 1000) {
            var register: [LedgerOperation] = []
            var subscribe: [LedgerOperation] = []
            for _ in start..<min(start + 1000, devices) {
                let joined = try join()
                register += joined.register
                subscribe += joined.subscribe
            }
            _ = try await append(actor: "client", register + subscribe)
        }
    }

    /// One simulated day from `dayStart` (microseconds): each hour's churn, the sends due in it with their audience,
    /// APNs progress and acknowledgements; at the day's end the retention sweep (with a `contentRetention`).
    mutating func simulateDay(startingAt dayStart: Int64, devices: Int) async throws {
        let hour: Int64 = 3_600_000_000
        let churn = Int(Double(devices) * GrowthWorkload.churnShare)
        let sends = GrowthWorkload.topicSendsPerDay + GrowthWorkload.tokenSendsPerDay
        // Which sends go to a single device (spread over the day), and when each send goes.
        var tokenSends = Set<Int>()
        while tokenSends.count < GrowthWorkload.tokenSendsPerDay {
            tokenSends.insert(Int.random(in: 0..<sends, using: &generator))
        }
        for h in 0..<24 {
            let hourStart = dayStart + Int64(h) * hour
            clock.set(hourStart + 60_000_000)
            try await churnHour(
                leaving: share(churn, hour: h), joining: share(churn, hour: h), moving: share(churn, hour: h))
            for send in 0..<sends where send * 24 / sends == h {
                let at = dayStart + Int64(send) * 86_400_000_000 / Int64(sends) + 300_000_000
                try await sendAndFollow(at: at, toOneDevice: tokenSends.contains(send))
            }
        }
        if let contentRetentionDays {
            clock.set(dayStart + 24 * hour - 1_000_000)
            let now = clock.now.microseconds
            compactions += try await sweep(
                before: LedgerTime(microseconds: now - Int64(contentRetentionDays) * 86_400_000_000))
        }
    }

    /// Hour `h`'s part of `daily`, so that the day's parts add up to it.
    func share(_ daily: Int, hour h: Int) -> Int { daily * (h + 1) / 24 - daily * h / 24 }

    /// An hour of churn: devices leaving (Android ones unregister, iOS ones are uninstalled and end at their next
    /// push), devices joining, devices moving one subscription.
    mutating func churnHour(leaving: Int, joining: Int, moving: Int) async throws {
        var unregister: [LedgerOperation] = []
        var picked = Set<Int>()
        for _ in 0..<leaving {
            let device = population.randomActive(excluding: picked, using: &generator)
            picked.insert(device)
            if population.ios[device] {
                population.states[device] = .uninstalled
            } else {
                population.states[device] = .ended
                unregister.append(.unregister(population.tokens[device], reason: "deleted by the device"))
            }
        }
        var moves: [LedgerOperation] = []
        for _ in 0..<moving {
            let device = population.randomActive(excluding: picked, using: &generator)
            picked.insert(device)
            let slot =
                device * GrowthWorkload.topicsPerDevice
                + Int.random(in: 0..<GrowthWorkload.topicsPerDevice, using: &generator)
            var topic: UInt8
            repeat {
                topic = UInt8.random(in: 0..<UInt8(GrowthWorkload.topics), using: &generator)
            } while population.isOn(device, topic: topic)
            let token = population.tokens[device]
            moves.append(.unsubscribe(token, messages.topics[Int(population.topics[slot])], via: .client))
            moves.append(.subscribe(token, messages.topics[Int(topic)], via: .client))
            population.topics[slot] = topic
        }
        var register: [LedgerOperation] = []
        var subscribe: [LedgerOperation] = []
        for _ in 0..<joining {
            let joined = try join()
            register += joined.register
            subscribe += joined.subscribe
        }
        let operations = unregister + moves + register + subscribe
        if !operations.isEmpty { _ = try await append(actor: "client", operations) }
    }

    /// A send at `at` (microseconds), to a random topic or a random device, then what follows it: the APNs outbox's
    /// progress, and half its recipients' acknowledgements.
    mutating func sendAndFollow(at: Int64, toOneDevice: Bool) async throws {
        clock.set(at)
        story += 1
        let recipients: [Int]
        let target: String
        if toOneDevice {
            let device = population.randomActive(excluding: [], using: &generator)
            recipients = [device]
            target = #""token":"\#(population.tokens[device].rawValue)""#
        } else {
            let topic = UInt8.random(in: 0..<UInt8(GrowthWorkload.topics), using: &generator)
            recipients = population.recipients(of: topic)
            target = #""topic":"\#(messages.topics[Int(topic)].rawValue)""#
        }
        let validated = try messages.message(target: target, story: story)
        let receipt = try await append(
            actor: "admin", [.send(validated.target, precedence: .leftToRight, messageJSON: validated.json)])
        guard case .sent(let seq, _) = receipt.outcomes[0] else { throw BenchError("a send was not appended") }
        audiences[seq] = recipients.count

        clock.set(at + 2_000_000)
        try await push(sendAt: seq, to: recipients)

        clock.set(at + 600_000_000)
        let acknowledging = recipients.filter {
            population.states[$0] == .registered
                && Double.random(in: 0..<1, using: &generator) < GrowthWorkload.acknowledgingShare
        }
        for start in stride(from: 0, to: acknowledging.count, by: 1000) {
            _ = try await append(
                actor: "device",
                acknowledging[start..<min(start + 1000, acknowledging.count)].map {
                    .acknowledge(population.tokens[$0], through: seq)
                })
        }
    }

    /// The `pushProgress` events `ProjectPusher` appends for the send at `seq`: its recipients walked in instance
    /// order, a record each ``GrowthWorkload/progressBatch`` recipients and one at the end, each with the 410s
    /// (an uninstalled app) since the last and those registrations' end. None when no recipient holds an APNs token.
    mutating func push(sendAt seq: UInt64, to recipients: [Int]) async throws {
        guard recipients.contains(where: { population.ios[$0] }) else { return }
        var failed: [Int] = []
        var recordedAt = 0
        func record(through device: Int, finished: Bool) async throws {
            let failures = failed.map {
                PushFailure(token: population.tokens[$0], kind: .unregistered, status: 410, reason: "Unregistered")
            }
            let operations: [LedgerOperation] =
                failed.map { .unregister(population.tokens[$0], reason: "APNs: Unregistered") } + [
                    .recordPushProgress(
                        PushProgress(
                            sendSeq: seq, throughToken: population.tokens[device], finished: finished,
                            failures: failures, settledThrough: finished ? seq : settled))
                ]
            _ = try await append(actor: "apns", operations)
            for device in failed { population.states[device] = .ended }
            failed.removeAll()
        }
        for (position, device) in recipients.enumerated() where population.ios[device] {
            if population.states[device] == .uninstalled { failed.append(device) }
            if position + 1 - recordedAt >= GrowthWorkload.progressBatch {
                try await record(through: device, finished: false)
                recordedAt = position + 1
            }
        }
        try await record(through: recipients[recipients.count - 1], finished: true)
        settled = seq
    }

    /// What `RetentionSweeper.forgetContents` does at `cutoff`; how many of its requests forgot something (each
    /// compacted the file).
    mutating func sweep(before cutoff: LedgerTime) async throws -> Int {
        var compactions = 0
        for _ in 0..<GrowthWorkload.sweepRequests {
            let receipt = try await ledger.append(
                WriteRequest(
                    actor: "retention", requestID: "retention-\(RequestID.random())",
                    operations: [.forgetContents(before: cutoff, limit: GrowthWorkload.sweepBatch)]))
            guard receipt.outcomes.first?.seq != nil else { break }
            compactions += 1
        }
        return compactions
    }
}

/// The topics, and the sends' message JSON: what `POST …/messages:send` stores for a message with a notification,
/// data and Android and APNs blocks, about ``GrowthWorkload/messageBytes`` long.
private struct MessageBodies {
    let topics: [TopicName]

    init() throws {
        topics = try (0..<GrowthWorkload.topics).map { try TopicName(String(format: "news-%02d", $0)) }
    }

    /// The message of story `story` to `target` (`"topic":"…"` or `"token":"…"`), validated as the route does.
    func message(target: String, story: Int) throws -> ValidatedMessage {
        func body(_ text: String) -> String {
            #"{"message":{\#(target),"#
                + #""notification":{"title":"Story \#(story): the council votes on the new tram line","#
                + #""body":"\#(text)","image":"https://cdn.example.com/stories/\#(story)/hero.jpg"},"#
                + #""data":{"story":"\#(story)","kind":"update","section":"city","#
                + #""deeplink":"https://example.com/news/\#(story)"},"#
                + #""android":{"priority":"high","ttl":"86400s","collapse_key":"story-\#(story)","#
                + #""notification":{"channel_id":"news","click_action":"OPEN_STORY"}},"#
                + #""apns":{"headers":{"apns-priority":"10","apns-push-type":"alert","#
                + #""apns-collapse-id":"story-\#(story)"},"#
                + #""payload":{"aps":{"sound":"default","mutable-content":1,"thread-id":"city"},"story":"\#(story)"}},"#
                + #""fcm_options":{"analytics_label":"city-update"}}}"#
        }
        func validated(_ text: String) throws -> ValidatedMessage {
            guard let message = try JSONValue(parsing: Array(body(text).utf8)).object?["message"]?.object else {
                throw BenchError("the growth workload's message is not an object")
            }
            return try MessageValidation.validate(message, precedence: .leftToRight)
        }
        let short = try validated("")
        let filler = "After a long debate the council voted this evening on the route of the new tram line. "
        let length = max(0, GrowthWorkload.messageBytes - short.json.count)
        return try validated(String(String(repeating: filler, count: length / filler.count + 1).prefix(length)))
    }
}

/// The simulated time: the ledger's clock (``Ledger/Options/clock``) reads it, the workload moves it.
private final class SimulatedClock: Sendable {
    private let microseconds: Atomic<Int64>

    init(_ start: LedgerTime) { microseconds = Atomic(start.microseconds) }

    var now: LedgerTime { LedgerTime(microseconds: microseconds.load(ordering: .relaxed)) }

    /// Moves the time to `microseconds`, or leaves it where it is if that is later (times never decrease).
    func set(_ microseconds: Int64) { self.microseconds.max(microseconds, ordering: .relaxed) }
}
