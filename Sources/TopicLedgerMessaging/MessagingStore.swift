import Foundation

/// A topic change the app asked for and the server has not confirmed yet: a subscription, or a Live Activity's
/// (a followed topic's activity token, a push-to-start token).
public struct TopicOperation: Codable, Equatable, Sendable, Identifiable {
    public enum Action: String, Codable, Sendable {
        case subscribe, unsubscribe
        /// Follow ``TopicOperation/topic``'s Live Activity with ``TopicOperation/pushToken``.
        case followLiveActivity
        /// Follow ``TopicOperation/topic``'s Live Activity no more.
        case unfollowLiveActivity
        /// Hold ``TopicOperation/pushToken`` as the push-to-start token of ``TopicOperation/attributesType``
        /// (``TopicOperation/topic`` is empty).
        case setPushToStartToken
    }
    public let id: UUID
    public let action: Action
    public let topic: String
    /// The ActivityKit token (hex) of a follow or a push-to-start token; `nil` otherwise.
    public var pushToken: String?
    /// The ActivityAttributes type of a push-to-start token; `nil` otherwise.
    public var attributesType: String?

    public init(
        id: UUID, action: Action, topic: String, pushToken: String? = nil, attributesType: String? = nil
    ) {
        self.id = id
        self.action = action
        self.topic = topic
        self.pushToken = pushToken
        self.attributesType = attributesType
    }

    /// Whether it is a Live Activity's operation (not a subscription).
    var isLiveActivity: Bool { action != .subscribe && action != .unsubscribe }
}

/// What the library keeps between launches: the token (and the server and project it belongs to), the topics
/// the app wants, and the topic operations still to send, in order. FirebaseMessaging keeps the same
/// "pending topics" list in the app's defaults.
struct MessagingState: Codable, Equatable {
    static let currentVersion = 1
    var version = MessagingState.currentVersion
    /// `serverURL` and `projectID` of the token: a token is only good where it was issued.
    var issuer: String?
    var token: String?
    /// The topics the app wants, as they will be once every pending operation has been applied.
    var topics: Set<String> = []
    var pending: [TopicOperation] = []
    /// The Live Activities the app follows, by topic: the activity's push token (hex), as it will be once every
    /// pending operation has been applied (absent in stores written before Live Activities).
    var liveActivities: [String: String]?
    /// The app's push-to-start tokens (hex), by ActivityAttributes type, likewise.
    var pushToStartTokens: [String: String]?
    /// The device's APNs token (hex) as the app last set it, `nil` when it has none or cleared it.
    var apnsToken: String?
    /// The APNs token is a development build's (pushed to APNs' sandbox).
    var apnsSandbox: Bool?
    /// The server holds ``apnsToken`` (or, `nil`, none) for ``token``: nothing to send.
    var apnsTokenSent: Bool?
    /// The ids of the latest messages handed to the app by the stream, and through APNs, newest last: a message
    /// that arrives both ways is handed over once (a stream's own redelivery of an unacknowledged message is
    /// not held back: at least once stays).
    var streamedMessageIDs: [String]?
    var pushedMessageIDs: [String]?
}

/// Reads and writes ``MessagingState`` as one JSON file, replaced atomically on every change, so a crash
/// leaves the previous or the next state and never half of one.
struct MessagingStore {
    let url: URL

    func load() throws(MessagingError) -> MessagingState {
        let data: Data
        do {
            data = try Data(contentsOf: url)
        } catch {
            if !FileManager.default.fileExists(atPath: url.path) { return MessagingState() }
            throw .store("cannot read \(url.lastPathComponent): \(error.localizedDescription)")
        }
        do {
            let state = try JSONDecoder().decode(MessagingState.self, from: data)
            guard state.version == MessagingState.currentVersion else {
                throw MessagingError.store("\(url.lastPathComponent) has version \(state.version)")
            }
            return state
        } catch {
            throw .store("\(url.lastPathComponent) is not a store this library wrote: \(error)")
        }
    }

    func save(_ state: MessagingState) throws(MessagingError) {
        do {
            try FileManager.default.createDirectory(
                at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            try encoder.encode(state).write(to: url, options: [.atomic])
        } catch {
            throw .store("cannot write \(url.lastPathComponent): \(error.localizedDescription)")
        }
    }
}
