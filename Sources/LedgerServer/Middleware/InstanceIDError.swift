import FCMWire
import Foundation
import Hummingbird

/// The legacy Instance ID error shape: `{"error":"INVALID_ARGUMENT"}`.
struct InstanceIDError: HTTPResponseError {
    let status: HTTPResponse.Status
    let code: String

    func response(from request: Request, context: some RequestContext) throws -> Response {
        try JSONResponse.encoded(InstanceIDErrorBody(error: code), status: status)
    }
}
