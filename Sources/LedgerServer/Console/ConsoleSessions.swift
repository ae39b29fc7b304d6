import Foundation
import LedgerCore
import Synchronization

/// The audit console's signed-in sessions: an unguessable id (32 random bytes, base64url) in an HttpOnly,
/// SameSite=Strict cookie, mapped here to the project and role the key granted. Held in memory: a restart
/// signs everyone out, and the key itself is never stored.
///
/// Each project has its own cap (``maximumPerProject``): a sign-in past it ends that project's oldest session,
/// never another project's, so one project's key cannot sign out another project's users. Every session lives
/// ``lifetime`` from its sign-in, so a project's sessions expire in the order they were opened: each project
/// keeps its ids in that order, and a sign-in drops the expired and the evicted from the front, O(1) amortized.
///
/// - Note: Thread-safe.
final class ConsoleSessions: Sendable {
    struct Session: Sendable {
        let project: ProjectID
        let role: CredentialStore.Role
        let expires: ContinuousClock.Instant
    }

    /// One project's session ids in the order they were opened (so in the order they expire), from `head` on.
    /// Ids already closed are skipped when they reach the front, and dropped all at once when they are more
    /// than the live ones.
    private struct OpeningOrder {
        var ids: [String] = []
        var head = 0
        var live = 0

        var pending: Int { ids.count - head }
    }

    private struct State {
        var sessions: [String: Session] = [:]
        var orders: [ProjectID: OpeningOrder] = [:]
    }

    static let lifetime: Duration = .seconds(8 * 3600)
    /// Sessions one project holds at once.
    let maximumPerProject: Int
    private let state = Mutex(State())
    private let now: @Sendable () -> ContinuousClock.Instant

    init(maximumPerProject: Int = 1_000, now: @escaping @Sendable () -> ContinuousClock.Instant = { .now }) {
        self.maximumPerProject = maximumPerProject
        self.now = now
    }

    /// A new session's id. The project's expired sessions are dropped first; at ``maximumPerProject`` its
    /// oldest goes.
    func open(project: ProjectID, role: CredentialStore.Role) -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let id = Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        let time = now()
        let cap = maximumPerProject
        state.withLock { state in
            var order = state.orders[project] ?? OpeningOrder()
            while order.head < order.ids.count {
                let front = order.ids[order.head]
                guard let session = state.sessions[front] else {
                    order.head += 1  // closed already
                    continue
                }
                guard session.expires <= time || order.live >= cap else { break }
                state.sessions.removeValue(forKey: front)
                order.head += 1
                order.live -= 1
            }
            // Compacted when the dropped front or the closed ids left behind outnumber the live ones.
            if (order.head > 64 && order.head * 2 > order.ids.count) || order.pending > 2 * max(order.live, 64) {
                order.ids = order.ids[order.head...].filter { state.sessions[$0] != nil }
                order.head = 0
            }
            state.sessions[id] = Session(project: project, role: role, expires: time + Self.lifetime)
            order.ids.append(id)
            order.live += 1
            state.orders[project] = order
        }
        return id
    }

    /// The live session `id` names, or `nil`.
    func session(_ id: String) -> Session? {
        let time = now()
        return state.withLock { state in
            guard let session = state.sessions[id] else { return nil }
            guard session.expires > time else {
                Self.remove(id, of: session.project, from: &state)
                return nil
            }
            return session
        }
    }

    func close(_ id: String) {
        state.withLock { state in
            guard let session = state.sessions[id] else { return }
            Self.remove(id, of: session.project, from: &state)
        }
    }

    /// The live sessions of `project`.
    func count(of project: ProjectID) -> Int {
        state.withLock { $0.orders[project]?.live ?? 0 }
    }

    /// The ids `project` keeps in opening order, closed ones not yet dropped included (tests check it stays
    /// within twice the live ones).
    func queuedIDs(of project: ProjectID) -> Int {
        state.withLock { $0.orders[project]?.pending ?? 0 }
    }

    private static func remove(_ id: String, of project: ProjectID, from state: inout State) {
        state.sessions.removeValue(forKey: id)
        state.orders[project]?.live -= 1
    }
}
