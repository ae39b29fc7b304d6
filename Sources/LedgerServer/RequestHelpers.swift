import Foundation
import HTTPTypes
import Hummingbird
import LedgerCore

/// Who is calling, once authenticated for a project.
struct Caller {
    let project: ProjectID
    let role: CredentialStore.Role

    /// The `actor` recorded in the events this caller appends.
    var actor: String { role.rawValue }
}

extension Request {
    /// The bearer secret of the `Authorization` header, if any.
    var bearerSecret: String? {
        guard let header = headers[.authorization] else { return nil }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        return String(parts[1])
    }

    /// The client API key (`x-goog-api-key`), if any.
    var apiKey: String? {
        HTTPField.Name("x-goog-api-key").flatMap { headers[$0] }
    }

    /// A request id for the events this request appends.
    var ledgerRequestID: String { RequestID.random() }
}

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

extension Parameters {
    /// A path parameter, percent-decoded (the Admin SDKs percent-encode tokens and topic names).
    func decoded(_ name: String) throws -> String {
        let raw = try require(name)
        guard let decoded = PercentDecoding.decode(raw) else {
            throw FCMError.invalidArgument("invalid percent-encoding in the path", field: name)
        }
        return decoded
    }

    /// A message id from a path (`text`, the parameter or a part of it): a decimal number from 1 to 2^63-1,
    /// or 400 naming `message`.
    static func messageID(_ text: some StringProtocol) throws -> UInt64 {
        guard text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }), let id = UInt64(text),
            id >= 1, id <= UInt64(Int64.max)
        else {
            throw FCMError.invalidArgument("a message id is a decimal number from 1 to \(Int64.max)", field: "message")
        }
        return id
    }

    /// The project of the path, validated.
    func project() throws -> ProjectID {
        do {
            return try ProjectID(try decoded("project"), field: "project")
        } catch let error as LedgerCoreError {
            throw FCMError.notFound("Project not found: \(error.message)")
        }
    }
}

/// Reading request bodies as JSON objects, with FCM-shaped errors.
enum JSONBody {
    /// The body as a JSON object, typed (``JSONValue/init(parsing:)``): what the send route validates.
    ///
    /// - Throws: 413 when larger than `limit`; 400 INVALID_ARGUMENT when empty or not a JSON object.
    static func parsedObject(_ request: Request, limit: Int) async throws -> [String: JSONValue] {
        let buffer = try await bytes(request, limit: limit)
        if buffer.readableBytes == 0 {
            throw FCMError.invalidArgument("Request body is empty; a JSON object is expected.")
        }
        let value: JSONValue
        do {
            value = try JSONValue(parsing: buffer.readableBytesView)
        } catch {
            throw FCMError.invalidArgument("Invalid JSON payload received: \(error).")
        }
        guard let object = value.object else {
            throw FCMError.invalidArgument("Invalid JSON payload received: the body must be a JSON object.")
        }
        return object
    }

    /// The body's bytes, empty or passing ``StrictJSON`` (UTF-8, no byte-order mark, no repeated names).
    ///
    /// - Throws: 413 when larger than `limit`; 400 INVALID_ARGUMENT when the strict checks fail.
    static func bytes(_ request: Request, limit: Int) async throws -> ByteBuffer {
        let buffer: ByteBuffer
        do {
            buffer = try await request.body.collect(upTo: limit)
        } catch {
            throw FCMError(
                status: .contentTooLarge, googleStatus: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT",
                message: "Request body is larger than \(limit) bytes.")
        }
        if buffer.readableBytes > 0, let problem = StrictJSON.problem(in: buffer.readableBytesView) {
            throw FCMError.invalidArgument("Invalid JSON payload received: \(problem).")
        }
        return buffer
    }
}

/// `pageSize` and `pageToken` (also snake_case) of a list request. Sizes above the maximum are coerced to
/// it (Google AIP-158); zero, negative or non-numeric sizes are 400.
struct PageRequest {
    let size: Int
    /// The last item of the previous page; the page starts after it.
    let after: String?

    init(_ request: Request, defaultSize: Int, maximumSize: Int) throws {
        let query = request.uri.queryParameters
        var size = defaultSize
        if let text = query["pageSize"] ?? query["page_size"] {
            guard let value = Int(text), value >= 1 else {
                throw FCMError.invalidArgument("pageSize must be a positive integer", field: "pageSize")
            }
            size = min(value, maximumSize)
        }
        self.size = size
        self.after = (query["pageToken"] ?? query["page_token"]).map(String.init)
    }
}
