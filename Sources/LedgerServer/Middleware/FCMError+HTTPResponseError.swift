import FCMWire
import Hummingbird

extension FCMError: HTTPResponseError {
    /// The Google API error body (``GoogleErrorBody``) with the error's status and headers.
    public func response(from request: Request, context: some RequestContext) throws -> Response {
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
}
