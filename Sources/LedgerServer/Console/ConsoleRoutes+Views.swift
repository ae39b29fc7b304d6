import Foundation
import HTTPTypes
import Hummingbird
import LedgerCore
import LedgerStore
import LedgerQueries

/// The console's devices, topics and log pages.
extension ConsoleRoutes {
    static let deliveriesShown = 200
    static let topicsPerPage = 100
    static let membersPerPage = 100
    static let eventsPerPage = 50
    /// The most events one log page reads looking for filter matches; past it the page links on from where it
    /// stopped, so a filter that matches little in a long log still answers at once.
    static let eventsScanned = 20_000

    /// `/console/devices?token=&at=`: a device's registrations, subscription history, topics at a moment, and
    /// deliveries with their acknowledgements.
    func device(_ request: Request) async throws -> Response {
        let (ledger, visitor) = try await signedIn(request)
        let query = request.uri.queryParameters
        let tokenText = query["token"].map(String.init) ?? ""
        let atText = query["at"].map(String.init) ?? ""
        var view = ConsoleView.Device(token: tokenText, at: atText)
        func show(_ view: ConsoleView.Device, status: HTTPResponse.Status = .ok) -> Response {
            page("device", title: "Devices", visitor: visitor, view, status: status)
        }
        guard !tokenText.isEmpty else { return show(view) }
        guard let token = try? RegistrationToken(tokenText) else {
            view.error = "That is not a registration token."
            return show(view, status: .badRequest)
        }
        view.audit = try ledger.read { snapshot in
            let at = try moment(atText, in: snapshot) { error in
                var invalid = view
                invalid.error = error
                return show(invalid, status: .badRequest)
            }
            guard let audit = try snapshot.instanceAudit(token, at: at) else { return nil }
            let json = try AuditJSON.instance(audit, in: snapshot)
            let newest = audit.deliveries.reversed().prefix(Self.deliveriesShown)
            return ConsoleView.Device.Audit(
                token: json.token, registered: json.registered, atSeq: json.at.seq, atTime: json.at.time,
                acknowledgedThroughSeq: json.acknowledgedThroughSeq, registrations: json.registrations,
                subscriptions: json.subscriptions,
                topics: audit.topicsAt.map {
                    ConsoleView.TopicLink(name: $0.rawValue, encoded: Self.pathSegment($0.rawValue))
                },
                platform: audit.platform ?? "not given", appId: audit.appID ?? "not given",
                deliveryCount: audit.deliveries.count, deliveriesCut: audit.deliveries.count > Self.deliveriesShown,
                shownDeliveries: newest.count,
                deliveries: newest.map { delivery in
                    ConsoleView.Device.Delivery(
                        time: delivery.time.description, messageId: String(delivery.messageID),
                        kind: delivery.target.kindName, target: delivery.target.text,
                        acknowledged: delivery.acknowledged, push: delivery.push?.summary ?? "")
                },
                hasAPNsTokens: !json.apnsTokens.isEmpty, apnsTokens: json.apnsTokens)
        }
        guard view.audit != nil else {
            view.error = "No device with that token was ever registered in this project."
            return show(view, status: .notFound)
        }
        return show(view)
    }

    /// `/console/topics?order=name|subscribers&after=`: topics with their subscriber counts, 100 a page.
    func topics(_ request: Request) async throws -> Response {
        let (ledger, visitor) = try await signedIn(request)
        let query = request.uri.queryParameters
        let order: TopicOrder = query["order"] == "subscribers" ? .subscribers : .name
        let after = query["after"].flatMap { MessageRoutes.topic(fromPageToken: String($0)) }
        let all = try ledger.read { try $0.topicsWithCounts(orderedBy: order) }
        let slice = order.page(of: all, after: after, size: Self.topicsPerPage)
        var next: String?
        if slice.endIndex < all.count, let last = slice.last {
            next = Self.link(
                "/console/topics", ["order": order.rawValue, "after": MessageRoutes.pageToken(after: last)])
        }
        let view = ConsoleView.Topics(
            byName: order == .name,
            topics: slice.map {
                ConsoleView.Topics.Row(
                    name: $0.topic.rawValue, encoded: Self.pathSegment($0.topic.rawValue), subscribers: $0.subscribers)
            }, next: next)
        return page("topics", title: "Topics", visitor: visitor, view)
    }

    /// `/console/topics/{topic}?at=&after=`: the subscriber count over time as a chart, and the members at a
    /// moment, 100 a page in registration order.
    func topic(_ request: Request, _ context: LedgerRequestContext) async throws -> Response {
        let (ledger, visitor) = try await signedIn(request)
        let text = (try? context.parameters.decoded("topic")) ?? ""
        let query = request.uri.queryParameters
        let atText = query["at"].map(String.init) ?? ""
        var view = ConsoleView.Topic(name: text, encoded: Self.pathSegment(text), at: atText)
        let title = "Topic \(text)"
        let notFound = {
            page(
                "not-found", title: "Not found", visitor: visitor,
                ConsoleView.NotFound(detail: "No device ever subscribed to a topic of that name in this project."),
                status: .notFound)
        }
        guard let name = try? TopicName(text) else { return notFound() }
        let after = query["after"].flatMap { UInt32(String($0)) }
        let found: Bool = try ledger.read { snapshot in
            let at = try moment(atText, in: snapshot) { error in
                var invalid = view
                invalid.error = error
                return page("topic", title: title, visitor: visitor, invalid, status: .badRequest)
            }
            guard let members = try snapshot.members(of: name, at: at, after: after, limit: Self.membersPerPage),
                let audit = try snapshot.topicAudit(name, at: at, members: false)
            else { return false }
            view.atSeq = at
            if at > 0, let event = try snapshot.event(at: at) { view.atTime = event.time.description }
            view.count = members.count
            view.members = members.members.map(\.token.rawValue)
            if let next = members.nextAfter {
                view.next = Self.link(
                    "/console/topics/\(Self.pathSegment(text))", ["at": atText, "after": String(next)])
            }
            let chart = try SubscriberChart(history: audit.history, head: try snapshot.head().seq) { seq in
                try snapshot.event(at: seq)?.time.description ?? ""
            }
            view.chart = chart.svg
            view.chartCaption = chart.caption
            return true
        }
        return found ? page("topic", title: title, visitor: visitor, view) : notFound()
    }

    /// `/console/log?kind=&token=&topic=&from=&to=&after=`: events oldest first, 50 a page, each with its hash
    /// and the previous one.
    func log(_ request: Request) async throws -> Response {
        let (ledger, visitor) = try await signedIn(request)
        let query = request.uri.queryParameters
        let text = { (name: String) -> String in query[name[...]].map(String.init) ?? "" }
        let kindText = text("kind")
        let tokenText = text("token")
        let topicText = text("topic")
        let fromText = text("from")
        let toText = text("to")
        var view = ConsoleView.Log(
            token: tokenText, topic: topicText, from: fromText, to: toText,
            kinds: ([("", "any")] + LedgerEvent.Kind.allCases.map { ($0.rawValue, $0.rawValue) }).map {
                ConsoleView.Log.Kind(value: $0.0, label: $0.1, selected: $0.0 == kindText)
            })
        let kind = LedgerEvent.Kind(rawValue: kindText)
        let from = fromText.isEmpty ? 1 : UInt64(fromText)
        let to = toText.isEmpty ? UInt64.max : UInt64(toText)
        guard (kindText.isEmpty || kind != nil), let from, let to, from >= 1 else {
            view.error = "Seqs are whole numbers from 1; kinds are those in the list."
            return page("log", title: "The log", visitor: visitor, view, status: .badRequest)
        }
        let start = max(from, query["after"].flatMap { UInt64(String($0)) }.map { $0 &+ 1 } ?? from)
        var events: [ConsoleView.Log.Event] = []
        var next: UInt64?
        try ledger.readLog { snapshot in
            var scanned = 0
            try snapshot.forEachChainedEvent(from: start, through: to) { event, previous, hash in
                scanned += 1
                if Self.matches(event, kind: kind, token: tokenText, topic: topicText) {
                    events.append(
                        ConsoleView.Log.Event(
                            seq: event.seq, time: event.time.description, kind: event.kind.rawValue,
                            detail: EventText.line(event, hash: hash), hash: Hex.encode(Array(hash)),
                            previous: Hex.encode(previous)))
                }
                if events.count == Self.eventsPerPage || scanned == Self.eventsScanned {
                    if event.seq < to, event.seq < (try snapshot.head().seq) { next = event.seq }
                    return false
                }
                return true
            }
        }
        view.events = events
        if let next {
            view.next = Self.link(
                "/console/log",
                [
                    "kind": kindText, "token": tokenText, "topic": topicText, "from": fromText, "to": toText,
                    "after": String(next),
                ])
        }
        return page("log", title: "The log", visitor: visitor, view)
    }

    static func matches(_ event: LedgerEvent, kind: LedgerEvent.Kind?, token: String, topic: String) -> Bool {
        if let kind, event.kind != kind { return false }
        var tokens: [String] = []
        var topics: [String] = []
        switch event.body {
        case .registered(let t, _, _), .unregistered(let t, _), .acknowledged(let t, _), .apnsTokenSet(let t, _),
            .apnsTokenCleared(let t, _):
            tokens = [t.rawValue]
        case .subscribed(let t, let name, _), .unsubscribed(let t, let name, _),
            .liveActivityFollowed(let t, let name, _), .liveActivityUnfollowed(let t, let name, _):
            tokens = [t.rawValue]
            topics = [name.rawValue]
        case .sent(let sent):
            switch sent.target {
            case .topic(let name): topics = [name.rawValue]
            case .token(let t): tokens = [t.rawValue]
            case .condition(let text): topics = [text]
            }
        case .pushProgress(let progress):
            tokens = progress.failures.map(\.token.rawValue) + (progress.throughToken.map { [$0.rawValue] } ?? [])
        case .erased(let erasure): tokens = [erasure.pseudonym.rawValue]
        case .liveActivityChannelCreated(let change), .liveActivityChannelDeleted(let change):
            topics = [change.topic.rawValue]
        case .pushToStartTokenSet(let t, _, _): tokens = [t.rawValue]
        case .liveActivitiesEnded(let name, _, _): topics = [name.rawValue]
        case .audience, .retention: break
        }
        if !token.isEmpty && !tokens.contains(token) { return false }
        if !topic.isEmpty && !topics.contains(where: { $0 == topic || $0.contains("'\(topic)'") }) { return false }
        return true
    }

    /// A topic name as one path segment: `%` is the only allowed character that needs escaping.
    static func pathSegment(_ name: String) -> String { name.replacingOccurrences(of: "%", with: "%25") }

    /// `path?query`, leaving out empty values.
    static func link(_ path: String, _ parameters: KeyValuePairs<String, String>) -> String {
        var components = URLComponents()
        components.path = path
        let items = parameters.filter { !$0.value.isEmpty }.map { URLQueryItem(name: $0.key, value: $0.value) }
        components.queryItems = items.isEmpty ? nil : items
        return components.string ?? path
    }
}

/// A topic's subscriber count over the log as an SVG step chart, drawn on the server from numbers only (no
/// user input reaches the markup, which is why the template may insert it unescaped). At most 600 points: a
/// long history is bucketed by seq, keeping each bucket's lowest and highest count, so spikes stay visible.
struct SubscriberChart {
    let svg: String
    let caption: String
    static let width = 720.0
    static let height = 200.0
    static let margin = 36.0

    init(history: [(seq: UInt64, count: Int)], head: UInt64, time: (UInt64) throws -> String) throws {
        guard let first = history.first else {
            svg =
                #"<svg class="chart" role="img" aria-label="no subscribers yet" viewBox="0 0 720 40" xmlns="http://www.w3.org/2000/svg"><text x="10" y="25" fill="currentColor">No subscriptions yet.</text></svg>"#
            caption = "No subscriptions yet."
            return
        }
        let end = max(head, history.last!.seq)
        let span = Double(max(end - first.seq, 1))
        let top = Double(max(history.map(\.count).max() ?? 1, 1))
        var points: [(x: Double, y: Double)] = []
        let buckets = 300
        var bucketed: [(seq: UInt64, count: Int)] = []
        if history.count > buckets * 2 {
            var index = 0
            for bucket in 0..<buckets {
                let limit = first.seq + UInt64(Double(bucket + 1) / Double(buckets) * span)
                var low: (UInt64, Int)?
                var high: (UInt64, Int)?
                while index < history.count, history[index].seq <= limit {
                    let entry = history[index]
                    if low == nil || entry.count < low!.1 { low = (entry.seq, entry.count) }
                    if high == nil || entry.count > high!.1 { high = (entry.seq, entry.count) }
                    index += 1
                }
                if let low, let high {
                    bucketed += low.0 <= high.0 ? [low, high] : [high, low]
                }
            }
        } else {
            bucketed = history
        }
        let plotWidth = Self.width - 2 * Self.margin
        let plotHeight = Self.height - 2 * Self.margin
        func x(_ seq: UInt64) -> Double { Self.margin + Double(seq - first.seq) / span * plotWidth }
        func y(_ count: Int) -> Double { Self.height - Self.margin - Double(count) / top * plotHeight }
        var previous: Double?
        for entry in bucketed {
            if let previous { points.append((x(entry.seq), previous)) }
            points.append((x(entry.seq), y(entry.count)))
            previous = y(entry.count)
        }
        if let previous { points.append((x(end), previous)) }
        let path = points.map { String(format: "%.1f,%.1f", $0.x, $0.y) }.joined(separator: " ")
        let firstTime = try time(first.seq)
        let lastTime = try time(end)
        let peak = Int(top)
        let now = history.last!.count
        svg = """
            <svg class="chart" role="img" aria-label="subscribers from \(peak == 0 ? 0 : history.first!.count) to \(now), at most \(peak)" viewBox="0 0 \(Int(Self.width)) \(Int(Self.height))" xmlns="http://www.w3.org/2000/svg">\
            <line x1="\(Self.margin)" y1="\(Self.height - Self.margin)" x2="\(Self.width - Self.margin)" y2="\(Self.height - Self.margin)" stroke="currentColor" stroke-width="1"/>\
            <line x1="\(Self.margin)" y1="\(Self.margin)" x2="\(Self.margin)" y2="\(Self.height - Self.margin)" stroke="currentColor" stroke-width="1"/>\
            <polyline points="\(path)" fill="none" stroke="#2557a7" stroke-width="2"/>\
            <text x="\(Self.margin - 4)" y="\(Self.margin + 4)" text-anchor="end" font-size="11" fill="currentColor">\(peak)</text>\
            <text x="\(Self.margin - 4)" y="\(Self.height - Self.margin + 4)" text-anchor="end" font-size="11" fill="currentColor">0</text>\
            <text x="\(Self.margin)" y="\(Self.height - 8)" font-size="11" fill="currentColor">seq \(first.seq)</text>\
            <text x="\(Self.width - Self.margin)" y="\(Self.height - 8)" text-anchor="end" font-size="11" fill="currentColor">seq \(end)</text>\
            </svg>
            """
        caption =
            "Subscribers after each change, from seq \(first.seq) (\(firstTime)) to seq \(end) (\(lastTime)): \(now) now, \(peak) at most."
    }
}
