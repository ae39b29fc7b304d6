import Crypto
import Foundation
import Synchronization

/// The provider token APNs authenticates a provider with: an ES256 JWT, header `{alg, kid}`, claims
/// `{iss, iat}`, signed with the team's P-256 key (Apple, "Establishing a token-based connection to APNs").
///
/// Apple's rules, kept here: a token is reused for up to 50 minutes (APNs refuses one older than an hour with
/// 403 `ExpiredProviderToken`), and renewed no more often than every 20 minutes (more often is 429
/// `TooManyProviderTokenUpdates`, and the connection stays unusable for a while) — except after APNs has
/// answered `ExpiredProviderToken`, when the token it refused is dropped at once.
///
/// A token is kept in `store` (mode 0600) when one is given, and a token found there at start is used again while
/// it is under 50 minutes old and was signed by the same key: a restarted server minting a new token at once
/// would get 429 `TooManyProviderTokenUpdates` from APNs for the rest of the 20 minutes.
///
/// - Note: Thread-safe. Never log a token: it is a credential for an hour.
public final class APNsProviderToken: Sendable {
    static let reuseSeconds: Double = 50 * 60
    static let minimumRenewalSeconds: Double = 20 * 60

    public let teamID: String
    public let keyID: String
    /// Where the current token is kept across restarts (`nil`: nowhere).
    let store: String?
    /// Seconds since 1970 (tests move it).
    private let now: @Sendable () -> Double
    /// The signing key lives in the state (swift-crypto's keys are not `Sendable`): used only with the lock held.
    private let state: Mutex<State>

    private struct State {
        let key: P256.Signing.PrivateKey
        var token: String?
        var issuedAt: Double = 0
        var minted = 0
    }

    public init(
        teamID: String, keyID: String, key: sending P256.Signing.PrivateKey, store: String? = nil,
        now: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }
    ) {
        self.teamID = teamID
        self.keyID = keyID
        self.store = store
        self.now = now
        var initial = State(key: key)
        if let store, let kept = Self.kept(in: store, teamID: teamID, keyID: keyID, key: initial.key, now: now()) {
            initial.token = kept.token
            initial.issuedAt = kept.issuedAt
        }
        state = Mutex(initial)
    }

    /// What `store` holds: `{"teamId","keyId","publicKey","iat","token"}`.
    private struct Kept: Codable {
        var teamId: String
        var keyId: String
        /// The signing key's public key (base64 of its raw representation): a token kept from another key is
        /// not used.
        var publicKey: String
        var iat: Int64
        var token: String
    }

    private static func kept(in store: String, teamID: String, keyID: String, key: P256.Signing.PrivateKey, now: Double)
        -> (token: String, issuedAt: Double)?
    {
        guard let data = FileManager.default.contents(atPath: store),
            let kept = try? JSONDecoder().decode(Kept.self, from: data), kept.teamId == teamID, kept.keyId == keyID,
            kept.publicKey == key.publicKey.rawRepresentation.base64EncodedString()
        else { return nil }
        let issuedAt = Double(kept.iat)
        // Not from the future (a clock set back), and young enough to be reused.
        guard issuedAt <= now + 60, now - issuedAt < reuseSeconds else { return nil }
        return (kept.token, issuedAt)
    }

    /// Writes `kept` to ``store`` (a temporary file renamed over it, mode 0600), with no lock held. Best effort:
    /// without it a restart within 20 minutes mints a new token, which APNs may refuse for a while.
    private func keep(_ kept: Kept) {
        guard let store, let data = try? JSONEncoder().encode(kept) else { return }
        let temporary = store + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { return }
        let written = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        if written == data.count { _ = rename(temporary, store) } else { unlink(temporary) }
    }

    /// The token to send now: the last one while it is under 50 minutes old, else a new one.
    public func current() throws -> String {
        let time = now()
        let (token, minted) = try state.withLock { state -> (String, Kept?) in
            if let token = state.token, time - state.issuedAt < Self.reuseSeconds { return (token, nil) }
            // At 50 minutes the last renewal is at least 50 minutes old: the 20-minute floor holds.
            let token = try mint(issuedAt: time, with: state.key)
            state.token = token
            state.issuedAt = time
            state.minted += 1
            let kept = Kept(
                teamId: teamID, keyId: keyID, publicKey: state.key.publicKey.rawRepresentation.base64EncodedString(),
                iat: Int64(time), token: token)
            return (token, kept)
        }
        // A new token is minted at most once in 50 minutes, so two of these writes never race.
        if let minted { keep(minted) }
        return token
    }

    /// APNs answered `ExpiredProviderToken` to `token`: the next ``current()`` mints a new one (if no other
    /// request has already replaced it).
    public func dropExpired(_ token: String) {
        state.withLock { state in
            if state.token == token { state.token = nil }
        }
    }

    /// How many tokens were minted so far.
    public var mintedCount: Int { state.withLock { $0.minted } }

    private func mint(issuedAt: Double, with key: P256.Signing.PrivateKey) throws -> String {
        // Team and key ids are 10 characters of [A-Z0-9] (checked when the configuration is read): nothing in
        // them needs JSON escaping.
        let header = Self.base64URL(Data(#"{"alg":"ES256","kid":"\#(keyID)"}"#.utf8))
        let claims = Self.base64URL(Data(#"{"iss":"\#(teamID)","iat":\#(Int64(issuedAt))}"#.utf8))
        let signingInput = "\(header).\(claims)"
        // `rawRepresentation` is r ‖ s, 64 bytes: the JWS form of an ES256 signature.
        let signature = try key.signature(for: Data(signingInput.utf8)).rawRepresentation
        return "\(signingInput).\(Self.base64URL(signature))"
    }

    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
