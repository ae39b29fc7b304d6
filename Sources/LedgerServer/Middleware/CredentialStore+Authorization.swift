import FCMWire
import Foundation
import HTTPTypes
import Hummingbird
import LedgerCore

extension CredentialStore {
    /// Authenticates the request for `project` with one of `roles`.
    ///
    /// - Throws: 401 when no valid credential is given; 403 when the credential is for another project or
    ///   may not do this (an auditor on a write route). Which projects exist is never revealed.
    func authorize(_ request: Request, project: ProjectID, roles: Set<Role>) throws -> Caller {
        let bearer = request.bearerSecret
        let apiKey = request.apiKey
        guard bearer != nil || apiKey != nil else {
            throw FCMError.unauthenticated(
                "Request is missing required authentication credential: a Bearer token or an x-goog-api-key header.")
        }
        // A credential works only in its own header: admin and auditor keys as a Bearer token, client API
        // keys as x-goog-api-key (a client key, which every installed app holds, is never an admin's bearer).
        let granted =
            (bearer.map { grants(for: $0).filter { $0.role != .client } } ?? [])
            + (apiKey.map { grants(for: $0).filter { $0.role == .client } } ?? [])
        guard !granted.isEmpty else { throw FCMError.unauthenticated("The credential given is not valid.") }
        let forProject = granted.filter { $0.project == project }
        guard !forProject.isEmpty else {
            throw FCMError.permissionDenied("The credential given is not valid for project \(project).")
        }
        // Prefer the most capable role the request holds.
        for role in [Role.admin, .client, .auditor] where roles.contains(role) {
            if forProject.contains(where: { $0.role == role }) { return Caller(project: project, role: role) }
        }
        throw FCMError.permissionDenied(
            "The \(forProject[0].role.rawValue) credential may not call this method.")
    }

    /// Authenticates a bearer of one of `roles` on a route without a project in its path (Instance ID):
    /// the credential names the project.
    func authorizeBearer(_ request: Request, roles: Set<Role>) throws -> Caller {
        guard let secret = request.bearerSecret else {
            throw InstanceIDError(status: .unauthorized, code: "UNAUTHENTICATED")
        }
        let granted = grants(for: secret)
        guard !granted.isEmpty else { throw InstanceIDError(status: .unauthorized, code: "UNAUTHENTICATED") }
        let allowed = granted.filter { roles.contains($0.role) }
        // A key that is valid but not of these roles (or, impossibly, of several projects) may not do this.
        guard let first = allowed.first, allowed.allSatisfy({ $0.project == first.project }) else {
            throw InstanceIDError(status: .forbidden, code: "PERMISSION_DENIED")
        }
        return Caller(project: first.project, role: allowed.contains { $0.role == .admin } ? .admin : first.role)
    }
}
