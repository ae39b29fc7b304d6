import APNsWire
import LedgerCore
import Synchronization

/// Each pushing project's APNs provider token and its broadcast channel client (``APNsChannelClient``: for a project
/// with `apns.broadcast`, and to delete the channels of one that turned it off): made once, on first use, and shared
/// by the project's pusher (``ProjectPusher``) and its channel routes (``LiveActivityChannelRoutes``).
///
/// One provider token per project, whoever asks: Apple refuses a key whose tokens are renewed more often than every
/// 20 minutes (429 `TooManyProviderTokenUpdates`), so a second signer for the channel requests would stall the pushes.
/// The channel client takes the settings the pusher takes (the key, `caFile`), with the `channelEndpoint` and
/// `broadcastEndpoint`.
///
/// - Note: Thread-safe. Never logs a provider token or a key.
final class APNsProviders: Sendable {
    private let configuration: ServerConfiguration
    private let made = Mutex<[ProjectID: Made]>([:])
    /// A test's stand-in for a project's channel management (``useChannelManagement(_:for:)``).
    private let standIns = Mutex<[ProjectID: any APNsChannelManagement]>([:])

    private struct Made {
        var token: APNsProviderToken
        /// `nil` until first asked for: to broadcast or make a channel (`apns.broadcast`), or to delete one made
        /// before `apns.broadcast` was turned off.
        var channels: APNsChannelClient?
    }

    init(configuration: ServerConfiguration) {
        self.configuration = configuration
    }

    /// The project's provider token, kept beside its ledger (`<data>/<project>/apns-provider-token.json`).
    ///
    /// - Throws: `LedgerCoreError` when the project has no `apns` settings, or its key cannot be read.
    func token(for project: ProjectID) throws -> APNsProviderToken {
        try made(for: project).token
    }

    /// The project's channel client, or `nil` when the project does not broadcast (no `apns`, or `apns.broadcast`
    /// is not true).
    ///
    /// - Throws: `LedgerCoreError` when the key or `caFile` cannot be read, or an endpoint is not usable.
    func channels(for project: ProjectID) throws -> APNsChannelClient? {
        guard let settings = configuration.apns[project], settings.broadcast else { return nil }
        return try channelClient(for: project, settings: settings)
    }

    /// The project's channel client, made on first use, whether or not the project broadcasts now.
    private func channelClient(for project: ProjectID, settings: APNsSettings) throws -> APNsChannelClient {
        if let client = made.withLock({ $0[project]?.channels }) { return client }
        let token = try token(for: project)
        let client = try APNsChannelClient(
            channelEndpoint: settings.channelEndpoint, broadcastEndpoint: settings.broadcastEndpoint,
            bundleID: settings.topic, providerToken: token, additionalTrustRoots: try settings.loadTrustRoots())
        let (kept, spare) = made.withLock { made -> (APNsChannelClient, APNsChannelClient?) in
            if let existing = made[project]?.channels { return (existing, client) }
            made[project]?.channels = client
            return (client, nil)
        }
        // Two first callers at once: the one made second is never used (it has not connected yet).
        _ = spare
        return kept
    }

    /// What the channel routes ask Apple for the project: a test's stand-in when one was given, else the project's
    /// channel client; `nil` when the project has no `apns` settings, or when `creating` and it does not broadcast.
    ///
    /// A channel that exists is read and deleted with the project's credentials whether or not `apns.broadcast` is
    /// still on: turning broadcasts off must not strand the channels it made at Apple (each counts towards Apple's
    /// 10,000 per app and environment).
    ///
    /// - Parameter creating: whether a new channel is to be made (only in a project that broadcasts).
    func channelManagement(for project: ProjectID, creating: Bool) throws -> (any APNsChannelManagement)? {
        guard let settings = configuration.apns[project], settings.broadcast || !creating else { return nil }
        if let standIn = standIns.withLock({ $0[project] }) { return standIn }
        return try channelClient(for: project, settings: settings)
    }

    /// Tests: the project's channel routes ask `standIn` instead of Apple.
    func useChannelManagement(_ standIn: any APNsChannelManagement, for project: ProjectID) {
        standIns.withLock { $0[project] = standIn }
    }

    /// Closes the channel clients' connections (the server's shutdown).
    func shutdown() async {
        let clients = made.withLock { $0.values.compactMap(\.channels) }
        for client in clients { await client.shutdown() }
    }

    private func made(for project: ProjectID) throws -> Made {
        if let made = made.withLock({ $0[project] }) { return made }
        guard let settings = configuration.apns[project] else {
            throw LedgerCoreError(.invalidArgument, "project \(project) has no apns settings")
        }
        let token = APNsProviderToken(
            teamID: settings.teamID, keyID: settings.keyID, key: try settings.loadKey(),
            store: "\(configuration.dataDirectory)/\(project.rawValue)/apns-provider-token.json")
        return made.withLock { made in
            if let existing = made[project] { return existing }
            made[project] = Made(token: token)
            return Made(token: token)
        }
    }
}

/// The channel management requests the channel routes make (``APNsChannelClient``, or a test's stand-in).
protocol APNsChannelManagement: Sendable {
    func createChannel(messageStoragePolicy: Int) async throws -> APNsChannelClient.Answer
    func deleteChannel(_ channelID: String) async throws -> APNsChannelClient.Answer
}

extension APNsChannelClient: APNsChannelManagement {}
