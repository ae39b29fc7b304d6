import Foundation
import Hummingbird
import LedgerCore

/// An error in the Google API shape, rendered as
/// `{"error":{"code":400,"message":"…","status":"INVALID_ARGUMENT","details":[{"@type":"…FcmError","errorCode":"…"}, …]}}`.
///
/// `errorCode` is what the Admin SDKs report as the reason (`UNREGISTERED`, `QUOTA_EXCEEDED`, …).
struct FCMError: HTTPResponseError {
    let status: HTTPResponse.Status
    /// The google.rpc status name (`INVALID_ARGUMENT`, `NOT_FOUND`, …).
    let googleStatus: String
    /// The FcmError code, when there is one.
    let errorCode: String?
    let message: String
    /// `google.rpc.BadRequest` field violations: (field, description).
    var fieldViolations: [(String, String)] = []
    /// Extra response headers (`Retry-After`).
    var headers: HTTPFields = [:]
    /// For 500s: the id of the server log line with the detail (a `google.rpc.RequestInfo` detail).
    var requestID: String?

    func response(from request: Request, context: some RequestContext) throws -> Response {
        var details: [GoogleErrorBody.Detail] = []
        if let errorCode { details.append(.fcmError(errorCode: errorCode)) }
        if let requestID { details.append(.requestInfo(requestID: requestID)) }
        if !fieldViolations.isEmpty {
            details.append(.badRequest(fieldViolations: fieldViolations.map { (field: $0.0, description: $0.1) }))
        }
        let body = GoogleErrorBody(
            error: GoogleErrorBody.Status(
                code: Int(status.code), message: message, status: googleStatus,
                details: details.isEmpty ? nil : details))
        var response = try JSONResponse.encoded(body, status: status)
        for field in headers { response.headers.append(field) }
        return response
    }

    static func invalidArgument(_ error: LedgerCoreError, errorCode: String? = "INVALID_ARGUMENT") -> FCMError {
        FCMError(
            status: .badRequest, googleStatus: "INVALID_ARGUMENT", errorCode: errorCode, message: error.description,
            fieldViolations: error.field.map { [($0, error.message)] } ?? [])
    }

    static func invalidArgument(_ message: String, field: String? = nil) -> FCMError {
        FCMError(
            status: .badRequest, googleStatus: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT",
            message: field.map { "\($0): \(message)" } ?? message,
            fieldViolations: field.map { [($0, message)] } ?? [])
    }

    static func notFound(_ message: String, errorCode: String = "NOT_FOUND") -> FCMError {
        FCMError(status: .notFound, googleStatus: "NOT_FOUND", errorCode: errorCode, message: message)
    }

    static func unauthenticated(_ message: String) -> FCMError {
        FCMError(
            status: .unauthorized, googleStatus: "UNAUTHENTICATED", errorCode: "THIRD_PARTY_AUTH_ERROR",
            message: message)
    }

    static func permissionDenied(_ message: String) -> FCMError {
        FCMError(
            status: .forbidden, googleStatus: "PERMISSION_DENIED", errorCode: "SENDER_ID_MISMATCH", message: message)
    }

    static func unavailable(_ message: String) -> FCMError {
        FCMError(status: .serviceUnavailable, googleStatus: "UNAVAILABLE", errorCode: "UNAVAILABLE", message: message)
    }
}

/// The legacy Instance ID error shape: `{"error":"INVALID_ARGUMENT"}`.
struct InstanceIDError: HTTPResponseError {
    let status: HTTPResponse.Status
    let code: String

    func response(from request: Request, context: some RequestContext) throws -> Response {
        try JSONResponse.encoded(InstanceIDErrorBody(error: code), status: status)
    }
}

/// JSON responses: `Encodable` bodies (the routes' own types in ResponseBodies.swift, LedgerStore's `AuditJSON`
/// shapes and `LedgerProofs` documents), or bytes written by hand on the hottest routes.
enum JSONResponse {
    /// `value` encoded by `JSONEncoder`, keys sorted and slashes unescaped.
    static func encoded(_ value: some Encodable, status: HTTPResponse.Status = .ok) throws -> Response {
        bytes(try encoder.encode(value), status: status)
    }

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    /// A body that is JSON already (assembled from bytes, as delivery pages are).
    static func bytes(_ json: some Sequence<UInt8>, status: HTTPResponse.Status = .ok) -> Response {
        Response(
            status: status, headers: [.contentType: "application/json; charset=UTF-8"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: json)))
    }
}
