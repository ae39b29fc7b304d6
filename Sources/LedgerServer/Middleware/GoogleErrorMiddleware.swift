import Foundation
import Hummingbird
import LedgerCore
import LedgerStore
import Logging
import NIOCore
import NIOHTTP1
import FCMWire

/// Renders every error a route throws in the Google shape (`google.rpc.Status`): the one place store and
/// core errors meet the wire.
///
/// - Errors that render themselves (``FCMError``, the legacy ``InstanceIDError``) pass through.
/// - Hummingbird's own errors (an unknown route's 404, a body over the limit) become the same status in
///   the Google shape.
/// - ``StoreError`` and ``LedgerCoreError`` map code by code (an exhaustive switch: a new code does not
///   compile until it has an answer).
/// - A request whose body was cut off or malformed, or whose connection failed, is 400 and logged at debug
///   level: it is the client's doing, and common (a client that hangs up, a body closed by its deadline).
/// - Anything else is a bug: 500 `INTERNAL` whose body carries only a request id; the log line with the same
///   id has the detail.
///
/// - Note: The log lines carry error descriptions, never request paths (which hold registration tokens).
struct GoogleErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    let logger: Logger

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        do {
            return try await next(request, context)
        } catch let error as FCMError {
            throw error
        } catch let error as InstanceIDError {
            throw error
        } catch let error as HTTPError {
            throw FCMError(httpError: error)
        } catch let error as StoreError {
            throw map(error)
        } catch let error as HTTPParserError {
            // A body cut off (the client hung up, or the body deadline closed its connection) or malformed (a bad
            // chunk size): the client's doing, not the server's.
            logger.debug("a request body ended early or is malformed", metadata: ["error": "\(error)"])
            throw FCMError.invalidArgument("The request body ended early or is malformed: \(error).")
        } catch let error where error is ChannelError || error is IOError {
            // The connection failed under the request: no one is left to read an answer.
            logger.debug("the connection ended before the request did", metadata: ["error": "\(error)"])
            throw FCMError.invalidArgument("The connection ended before the request did.")
        } catch let error as LedgerCoreError {
            throw FCMError.invalidArgument(error)
        } catch {
            throw internalError(error)
        }
    }

    private func map(_ error: StoreError) -> FCMError {
        switch error.code.kind {
        case .notFound:
            return FCMError.notFound("Requested entity was not found.")
        case .invalidArgument:
            return FCMError.invalidArgument(error.message)
        case .unavailable, .locked, .rebuildRequired, .incompatible:
            logger.error("ledger unavailable", metadata: ["error": "\(error)"])
            return FCMError.unavailable("The ledger is unavailable; nothing was written. Try again later.")
        case .corrupt:
            return internalError(error)
        }
    }

    private func internalError(_ error: any Error) -> FCMError {
        let requestID = RequestID.random()
        logger.error("internal error", metadata: ["ledger.errorId": "\(requestID)", "error": "\(error)"])
        return FCMError.internalError(requestID: requestID)
    }
}

extension FCMError {
    /// Hummingbird's own error, same status, Google shape.
    init(httpError: HTTPError) {
        let (status, message): (String, String) =
            switch httpError.status.code {
            case 400: ("INVALID_ARGUMENT", httpError.body ?? "The request is malformed.")
            case 401: ("UNAUTHENTICATED", "The request has no valid credential.")
            case 403: ("PERMISSION_DENIED", "The caller may not do this.")
            case 404: ("NOT_FOUND", "No such method or resource: check the path.")
            case 405: ("NOT_FOUND", "No such method for this path.")
            case 408: ("DEADLINE_EXCEEDED", "The request took too long to arrive.")
            case 413: ("INVALID_ARGUMENT", "The request body is too large.")
            case 429: ("RESOURCE_EXHAUSTED", "Too many requests.")
            case 500..<600: ("UNAVAILABLE", "The server cannot answer now.")
            default: ("INVALID_ARGUMENT", httpError.body ?? "The request is invalid.")
            }
        self.init(status: httpError.status, googleStatus: status, errorCode: status, message: message)
    }

    /// 500 INTERNAL that says nothing of the cause but the id of the log line that does.
    static func internalError(requestID: String) -> FCMError {
        var error = FCMError(
            status: .internalServerError, googleStatus: "INTERNAL", errorCode: "INTERNAL",
            message: "Internal error. The server log has the details under request id \(requestID).")
        error.requestID = requestID
        return error
    }
}
