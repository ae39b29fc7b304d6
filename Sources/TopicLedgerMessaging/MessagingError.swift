import Foundation

/// What can go wrong, by what the app can do about it. Server errors are mapped from the FCM error body
/// (`{"error":{"code":…,"status":…,"details":[{"errorCode":…}]}}`) the server answers with.
public enum MessagingError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A topic name the iOS SDK would refuse (`[a-zA-Z0-9-_.~%]{1,900}`, optionally after `/topics/`).
    case invalidTopicName(String)
    /// The server refused the request's content (400 `INVALID_ARGUMENT`); retrying will not help.
    case invalidArgument(String)
    /// The device has more topics than the server allows (400 `TOO_MANY_TOPICS`).
    case tooManyTopics(String)
    /// The registration token is not registered (any more): the library registers a new one and re-applies the
    /// topics on its own; this reaches the app only from a message stream whose registration was deleted.
    case unregistered
    /// The API key or project is wrong (401 `THIRD_PARTY_AUTH_ERROR`, 403 `SENDER_ID_MISMATCH` or
    /// `PERMISSION_DENIED`).
    case authentication(String)
    /// Over a rate or quota (429); retried after `Retry-After` seconds.
    case quotaExceeded(String, retryAfter: TimeInterval?)
    /// The server cannot serve the request now (503, 502, 504); retried.
    case unavailable(String, retryAfter: TimeInterval?)
    /// The server failed (500 `INTERNAL`); retried.
    case internalError(String)
    /// The request did not reach the server or its answer did not come back (URLError); retried.
    case network(String)
    /// An answer this library does not understand (a proxy's page, a status it does not expect).
    case unexpectedResponse(status: Int, String)
    /// The library's store file exists but cannot be read or written.
    case store(String)
    /// ``Messaging/close()`` was called while the caller waited; the operation stays in the store and the next
    /// instance sends it.
    case closed

    /// Whether the same request may succeed later. Topic operations with such an error are retried with
    /// backoff until they succeed.
    public var isRetryable: Bool {
        switch self {
        case .quotaExceeded, .unavailable, .internalError, .network: true
        case .unexpectedResponse(let status, _): status >= 500 || status == 408
        default: false
        }
    }

    /// How long the server asked the client to wait (`Retry-After`), if it did.
    public var retryAfter: TimeInterval? {
        switch self {
        case .quotaExceeded(_, let seconds), .unavailable(_, let seconds): seconds
        default: nil
        }
    }

    public var description: String {
        switch self {
        case .invalidTopicName(let name): "invalid topic name \"\(name)\": it must match [a-zA-Z0-9-_.~%]{1,900}"
        case .invalidArgument(let message): "invalid argument: \(message)"
        case .tooManyTopics(let message): "too many topics: \(message)"
        case .unregistered: "the registration token is not registered"
        case .authentication(let message): "not authorized: \(message)"
        case .quotaExceeded(let message, _): "over quota: \(message)"
        case .unavailable(let message, _): "unavailable: \(message)"
        case .internalError(let message): "server error: \(message)"
        case .network(let message): "network: \(message)"
        case .unexpectedResponse(let status, let message): "unexpected response \(status): \(message)"
        case .store(let message): "store: \(message)"
        case .closed: "closed before the server confirmed; the operation stays pending in the store"
        }
    }
}

extension MessagingError {
    /// The error a non-2xx answer stands for.
    static func from(status: Int, body: Data, retryAfterHeader: String?) -> MessagingError {
        let problem = ServerProblem(body)
        let message = problem?.message ?? "HTTP \(status)"
        let retryAfter = retryAfterHeader.flatMap(Self.seconds(retryAfter:))
        switch (status, problem?.errorCode ?? problem?.status) {
        case (400, "TOO_MANY_TOPICS"): return .tooManyTopics(message)
        case (400, _) where problem != nil: return .invalidArgument(message)
        case (404, "UNREGISTERED"): return .unregistered
        case (404, "NOT_FOUND"): return .unregistered
        case (401, _) where problem != nil, (403, _) where problem != nil: return .authentication(message)
        case (429, _): return .quotaExceeded(message, retryAfter: retryAfter)
        case (502, _), (503, _), (504, _): return .unavailable(message, retryAfter: retryAfter)
        case (500, _) where problem != nil: return .internalError(message)
        default: return .unexpectedResponse(status: status, message)
        }
    }

    /// The FcmError `errorCode` of an error body (`NOT_FOUND`, `UNREGISTERED`, …), if it has one.
    static func errorCode(in body: Data) -> String? {
        ServerProblem(body)?.errorCode
    }

    /// `Retry-After` as delay-seconds (RFC 9110 §10.2.3), bounded to a day; an HTTP date is ignored.
    static func seconds(retryAfter text: String) -> TimeInterval? {
        guard let value = Int(text.trimmingCharacters(in: .whitespaces)), value >= 0 else { return nil }
        return TimeInterval(min(value, 86_400))
    }

    static func from(transport error: any Error) -> MessagingError {
        if let error = error as? MessagingError { return error }
        if let error = error as? URLError { return .network("\(error.code.rawValue): \(error.localizedDescription)") }
        return .network(String(describing: error))
    }
}

/// The Google error body: `{"error":{"code":404,"message":"…","status":"NOT_FOUND","details":[…]}}`.
private struct ServerProblem {
    let message: String
    let status: String?
    let errorCode: String?

    init?(_ data: Data) {
        guard let body = try? JSONDecoder().decode(Body.self, from: data) else { return nil }
        message = body.error.message
        status = body.error.status
        errorCode = body.error.details?.lazy.compactMap(\.errorCode).first
    }

    private struct Body: Decodable { let error: Problem }
    private struct Problem: Decodable {
        let message: String
        let status: String?
        let details: [Detail]?
    }
    private struct Detail: Decodable { let errorCode: String? }
}
