import Crypto
import LedgerCore

/// The keys that may act on each project, stored as SHA-256 hashes and compared in constant time.
///
/// Read from the `projects` object of the config file (``ServerConfiguration/load(path:)``), keys given as
/// `sha256:<hex>` of the secret (`printf %s SECRET | sha256sum`):
/// ```json
/// {"projects": {"my-project": {"adminKeys": ["sha256:…"], "auditorKeys": ["sha256:…"],
///                               "clientApiKeys": ["sha256:…"]}}}
/// ```
///
/// - Important: Secrets are never stored, logged or echoed; only their hashes are kept.
public struct CredentialStore: Sendable {
    /// What a credential may do.
    public enum Role: String, Sendable {
        /// Server API: send, topic management (FCM v1 and Instance ID), audit reads.
        case admin
        /// Audit API only (read-only).
        case auditor
        /// Device registration and a device's own subscriptions (`x-goog-api-key`).
        case client
    }

    struct Entry: Sendable {
        let project: ProjectID
        let role: Role
        let hash: [UInt8]
    }

    private let entries: [Entry]
    /// The projects this server serves.
    public let projects: Set<ProjectID>

    init(entries: [Entry]) {
        self.entries = entries
        self.projects = Set(entries.map(\.project))
    }

    /// Dev mode: project `demo-project`, admin bearer `owner` (what the Firebase emulator credential sends),
    /// auditor bearer `auditor`, client API key `dev-client-key`.
    public static let development = CredentialStore(entries: [
        Entry(project: .default, role: .admin, hash: sha256("owner")),
        Entry(project: .default, role: .auditor, hash: sha256("auditor")),
        Entry(project: .default, role: .client, hash: sha256("dev-client-key")),
    ])

    /// The keys of the config file's projects (see ``ServerConfiguration/load(path:)``), hashed.
    ///
    /// - Throws: `LedgerCoreError.invalidArgument` naming what is wrong in the file.
    init(projects: [(name: String, section: ConfigurationFile.ProjectSection)], path: String) throws {
        var entries: [Entry] = []
        // Where each secret was first named: one secret has one role in one project, else the key every app
        // ships (a client key) could also be an admin's, or one project's auditor another project's.
        var places: [[UInt8]: String] = [:]
        for (name, section) in projects {
            let project = try ProjectID(name, field: "\(path): projects.\(name)")
            let lists: [(String, Role, [String]?)] = [
                ("adminKeys", .admin, section.adminKeys), ("auditorKeys", .auditor, section.auditorKeys),
                ("clientApiKeys", .client, section.clientApiKeys),
            ]
            for (field, role, hashes) in lists {
                for text in hashes ?? [] {
                    guard let hash = Self.hash(ofKey: text) else {
                        throw LedgerCoreError(
                            .invalidArgument, field: "\(path): projects.\(name).\(field)",
                            "keys must be given as sha256:<64 hex digits> of the secret")
                    }
                    let place = "projects.\(name).\(field)"
                    if let first = places[hash] {
                        guard first == place else {
                            throw LedgerCoreError(
                                .invalidArgument, field: "\(path): \(first) and \(place)",
                                "one key is given in both; a key has one role in one project")
                        }
                        continue  // the same key twice in one list grants nothing more
                    }
                    places[hash] = place
                    entries.append(Entry(project: project, role: role, hash: hash))
                }
            }
        }
        guard !entries.isEmpty else {
            throw LedgerCoreError(.invalidArgument, field: path, "the config file names no keys")
        }
        self.init(entries: entries)
    }

    /// Where a key (`sha256:<hex>`) is given among the projects' keys (`projects.<p>.adminKeys`, …), or `nil`.
    func place(ofKey key: String) -> String? {
        guard let hash = Self.hash(ofKey: key), let entry = entries.first(where: { $0.hash == hash }) else {
            return nil
        }
        let list =
            switch entry.role {
            case .admin: "adminKeys"
            case .auditor: "auditorKeys"
            case .client: "clientApiKeys"
            }
        return "projects.\(entry.project).\(list)"
    }

    /// The (project, role) pairs `secret` grants. Every entry is compared, in constant time per entry, so the
    /// time taken does not depend on which key (if any) matched.
    func grants(for secret: String) -> [(project: ProjectID, role: Role)] {
        let hash = Self.sha256(secret)
        var result: [(ProjectID, Role)] = []
        for entry in entries where Self.constantTimeEqual(entry.hash, hash) {
            result.append((entry.project, entry.role))
        }
        return result
    }

    static func sha256(_ secret: String) -> [UInt8] { Array(SHA256.hash(data: Array(secret.utf8))) }

    /// The 32 bytes a key of the config file names (`sha256:<64 hex digits>`), `nil` for anything else.
    static func hash(ofKey text: String) -> [UInt8]? {
        guard text.hasPrefix("sha256:"), let hash = Hex.decode(text.dropFirst(7)), hash.count == 32 else { return nil }
        return hash
    }

    /// Whether `secret` is one of `keys` (`sha256:<hex>`), compared in constant time.
    static func matches(_ secret: String, anyOf keys: [String]) -> Bool {
        let hash = sha256(secret)
        var found = false
        for key in keys {
            guard let bytes = Self.hash(ofKey: key) else { continue }
            if constantTimeEqual(bytes, hash) { found = true }
        }
        return found
    }

    static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for index in a.indices { difference |= a[index] ^ b[index] }
        return difference == 0
    }
}
