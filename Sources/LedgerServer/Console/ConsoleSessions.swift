import Foundation
import LedgerCore

/// The audit console's signed-in sessions: an unguessable id (32 random bytes, base64url) in an HttpOnly,
/// SameSite=Strict cookie, mapped here to the project and role the key granted. Held in memory: a restart
/// signs everyone out, and the key itself is never stored.
final class ConsoleSessions: @unchecked Sendable {
    // @unchecked: `sessions` is only touched with `lock` held.
    struct Session: Sendable {
        let project: ProjectID
        let role: CredentialStore.Role
        let expires: ContinuousClock.Instant
    }

    static let lifetime: Duration = .seconds(8 * 3600)
    static let maximumSessions = 10_000
    private let lock = NSLock()
    private var sessions: [String: Session] = [:]

    /// A new session's id. Expired sessions are dropped first; past ``maximumSessions`` the one closest to
    /// expiring goes.
    func open(project: ProjectID, role: CredentialStore.Role) -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let id = Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        let now = ContinuousClock.now
        lock.lock()
        defer { lock.unlock() }
        sessions = sessions.filter { $0.value.expires > now }
        if sessions.count >= Self.maximumSessions,
            let oldest = sessions.min(by: { $0.value.expires < $1.value.expires })
        {
            sessions.removeValue(forKey: oldest.key)
        }
        sessions[id] = Session(project: project, role: role, expires: now + Self.lifetime)
        return id
    }

    func session(_ id: String) -> Session? {
        lock.lock()
        defer { lock.unlock() }
        guard let session = sessions[id] else { return nil }
        guard session.expires > .now else {
            sessions.removeValue(forKey: id)
            return nil
        }
        return session
    }

    func close(_ id: String) {
        lock.lock()
        sessions.removeValue(forKey: id)
        lock.unlock()
    }
}
