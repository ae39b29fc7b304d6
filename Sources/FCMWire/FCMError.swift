import HTTPTypes
import LedgerCore

/// An error in the Google API shape, rendered as
/// `{"error":{"code":400,"message":"…","status":"INVALID_ARGUMENT","details":[{"@type":"…FcmError","errorCode":"…"}, …]}}`.
///
/// `errorCode` is what the Admin SDKs report as the reason (`UNREGISTERED`, `QUOTA_EXCEEDED`, …). The server
/// renders it (`FCMError+HTTPResponseError.swift` in LedgerServer).
public struct FCMError: Error, Sendable {
    public let status: HTTPResponse.Status
    /// The google.rpc status name (`INVALID_ARGUMENT`, `NOT_FOUND`, …).
    public let googleStatus: String
    /// The FcmError code, when there is one.
    public let errorCode: String?
    public let message: String
    /// `google.rpc.BadRequest` field violations: (field, description).
    public var fieldViolations: [(String, String)] = []
    /// Extra response headers (`Retry-After`).
    public var headers: HTTPFields = [:]
    /// For 500s: the id of the server log line with the detail (a `google.rpc.RequestInfo` detail).
    public var requestID: String?

    /// An error with no field violations, headers or request id (set them after, where they apply).
    public init(status: HTTPResponse.Status, googleStatus: String, errorCode: String?, message: String) {
        (self.status, self.googleStatus, self.errorCode, self.message) = (status, googleStatus, errorCode, message)
    }

    public static func invalidArgument(_ error: LedgerCoreError, errorCode: String? = "INVALID_ARGUMENT") -> FCMError {
        var invalid = FCMError(
            status: .badRequest, googleStatus: "INVALID_ARGUMENT", errorCode: errorCode, message: error.description)
        invalid.fieldViolations = error.field.map { [($0, error.message)] } ?? []
        return invalid
    }

    public static func invalidArgument(_ message: String, field: String? = nil) -> FCMError {
        var invalid = FCMError(
            status: .badRequest, googleStatus: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT",
            message: field.map { "\($0): \(message)" } ?? message)
        invalid.fieldViolations = field.map { [($0, message)] } ?? []
        return invalid
    }

    public static func notFound(_ message: String, errorCode: String = "NOT_FOUND") -> FCMError {
        FCMError(status: .notFound, googleStatus: "NOT_FOUND", errorCode: errorCode, message: message)
    }

    public static func unauthenticated(_ message: String) -> FCMError {
        FCMError(
            status: .unauthorized, googleStatus: "UNAUTHENTICATED", errorCode: "THIRD_PARTY_AUTH_ERROR",
            message: message)
    }

    public static func permissionDenied(_ message: String) -> FCMError {
        FCMError(
            status: .forbidden, googleStatus: "PERMISSION_DENIED", errorCode: "SENDER_ID_MISMATCH", message: message)
    }

    public static func unavailable(_ message: String) -> FCMError {
        FCMError(status: .serviceUnavailable, googleStatus: "UNAVAILABLE", errorCode: "UNAVAILABLE", message: message)
    }
}
