import APNsWire
import LedgerCore
import Synchronization

/// Each pushing project's APNs provider token and, for a project with `apns.broadcast`, its broadcast channel client
/// (``APNsChannelClient``): made once, on first use, and shared by the project's pusher (``ProjectPusher``) and its
/// channel routes (``LiveActivityChannelRoutes``).
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

    private struct Made {
        var token: APNsProviderToken
        /// `nil` until first asked for (and for a project without `apns.broadcast`).
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
