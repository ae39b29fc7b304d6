import Foundation

/// A topic change the app asked for and the server has not confirmed yet.
public struct TopicOperation: Codable, Equatable, Sendable, Identifiable {
    public enum Action: String, Codable, Sendable {
        case subscribe, unsubscribe
    }
    public let id: UUID
    public let action: Action
    public let topic: String
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
