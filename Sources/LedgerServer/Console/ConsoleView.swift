import LedgerQueries

/// The console's view models: what each page's template (``ConsoleTemplates``) shows, as typed values. The
/// templates read them by their property names (swift-mustache reflects on them); an optional that is `nil`,
/// a `false` and an empty list all leave a `{{#section}}` out, as a missing key did.
enum ConsoleView {
    /// Every page: the header's title and who is signed in, around the page's own `content` (the templates
    /// render their body inside `{{#content}}`).
    struct Page<Content> {
        let title: String
        let signedIn: Bool
        let project: String
        let role: String
        let content: Content

        init(title: String, visitor: Visitor?, content: Content) {
            self.title = title
            signedIn = visitor != nil
            project = visitor?.project ?? ""
            role = visitor?.role ?? ""
            self.content = content
        }
    }

    /// Who is signed in: the project and the role of the key that opened the session.
    struct Visitor {
        let project: String
        let role: String
    }

    struct SignIn {
        let error: String?
    }

    struct NotFound {
        let detail: String
    }

    /// `/console`: the head and the counts, and the last checkpoint signed.
    struct Overview {
        struct Checkpoint {
            let size: UInt64
            let note: String
        }

        let events: UInt64
        let headTime: String?
        let headHash: String
        let registered: Int
        let instances: Int
        let topics: Int
        let subscriptions: Int
        let messages: Int
        let checkpoint: Checkpoint?
    }

    /// `/console/messages`: the filter as given, a page of sends, the link to older ones.
    struct Messages {
        struct Send {
            let time: String
            let messageID: String
            let kind: String
            let target: String
            let recipients: String
        }

        let target: String
        let from: String
        let to: String
        var error: String?
        var sends: [Send] = []
        var next: String?
    }

    /// `/console/messages/{id}`: the replay beside the record, and a page of recipients.
    struct Message {
        struct PushCounts {
            let accepted: Int
            let unregistered: Int
            let failed: Int
            let pending: Int
            let expired: Int
        }

        struct Recipient {
            let token: String
            let acknowledged: Bool
            let push: String
        }

        let messageID: String
        let matches: Bool
        let verdict: String
        let seq: UInt64
        let time: String
        let kind: String
        let target: String
        let rule: String
        let recipientCount: Int
        let replayDigest: String
        let recorded: Bool
        let recordedCount: UInt64?
        let recordedDigest: String?
        let audienceSeq: UInt64?
        let acknowledgedCount: Int
        let pushCounts: PushCounts?
        let firstShown: Int
        let lastShown: Int
        let recipients: [Recipient]
        let next: String?
        let messageJSON: String
        /// "Content forgotten by erasure." or "… by retention at <time>.", when it is.
        let contentForgotten: String?
    }

    /// `/console/devices`: the lookup as given, and the device's audit when it was found.
    struct Device {
        struct Audit {
            let token: String
            let registered: Bool
            let atSeq: UInt64
            let atTime: String?
            let acknowledgedThroughSeq: UInt64
            let registrations: [AuditJSON.Interval]
            let subscriptions: [AuditJSON.Instance.Subscription]
            let topics: [TopicLink]
            let platform: String
            let appId: String
            let deliveryCount: Int
            let deliveriesCut: Bool
            let shownDeliveries: Int
            let deliveries: [Delivery]
            let hasAPNsTokens: Bool
            let apnsTokens: [AuditJSON.Instance.APNsToken]
        }

        struct Delivery {
            let time: String
            let messageId: String
            let kind: String
            let target: String
            let acknowledged: Bool
            let push: String
        }

        let token: String
        let at: String
        var error: String?
        var audit: Audit?
    }

    /// A topic's name and its path segment.
    struct TopicLink {
        let name: String
        let encoded: String
    }

    /// `/console/topics`: a page of topics with their subscriber counts.
    struct Topics {
        struct Row {
            let name: String
            let encoded: String
            let subscribers: Int
        }

        let byName: Bool
        let topics: [Row]
        let next: String?
    }

    /// `/console/topics/{topic}`: the subscriber chart and a page of members at a moment.
    struct Topic {
        let name: String
        let encoded: String
        let at: String
        var error: String?
        var atSeq: UInt64?
        var atTime: String?
        var count: Int?
        var members: [String] = []
        var next: String?
        /// SVG drawn from numbers only (``SubscriberChart``), inserted unescaped.
        var chart: String?
        var chartCaption: String?
    }

    /// `/console/log`: the filter as given, a page of events with their hashes.
    struct Log {
        struct Kind {
            let value: String
            let label: String
            let selected: Bool
        }

        struct Event {
            let seq: UInt64
            let time: String
            let kind: String
            let detail: String
            let hash: String
            let previous: String
        }

        let token: String
        let topic: String
        let from: String
        let to: String
        let kinds: [Kind]
        var error: String?
        var events: [Event] = []
        var next: String?
    }
}
