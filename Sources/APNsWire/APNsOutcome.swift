import Foundation

/// What became of one push, as APNs answered it ("Handling notification responses from APNs"), in the terms
/// the provider acts on.
public enum APNsOutcome: Sendable, Equatable {
    /// 200: APNs took it; `apnsID` names it in Apple's records.
    case accepted(apnsID: String)
    /// 410 `Unregistered` (or `ExpiredToken`): the token is no longer valid for the topic, since `since`
    /// (Apple's `timestamp`, milliseconds since 1970) when APNs gives one.
    case unregistered(since: Int64?)
    /// 400 `BadDeviceToken` or `DeviceTokenNotForTopic`: the token is wrong for this app; clear it, no retry.
    case badDeviceToken(reason: String)
    /// A final refusal of this push (another 400, 413, 404, 405): recorded, not retried.
    case rejected(status: Int, reason: String)
    /// 403 `InvalidProviderToken`: the project's APNs credentials are wrong; every push fails until they are
    /// mended, so pushes wait for it rather than fail.
    case providerTokenInvalid(reason: String)
    /// The push's lifetime ran out before APNs took it.
    case expired(lastReason: String)
    /// The provider stopped (its task was cancelled: a shutdown) before APNs answered; the push is still owed.
    case interrupted
}

/// One APNs answer, read: the status and the `reason` (and `timestamp`) of its JSON body.
struct APNsReply: Sendable, Equatable {
    let status: Int
    let reason: String?
    let timestamp: Int64?

    init(status: Int, body: [UInt8]) {
        self.status = status
        struct Body: Decodable {
            let reason: String?
            let timestamp: Int64?
        }
        // APNs answers 200 with no body: whatever came with one is not read (a relay may echo the request).
        let decoded = status == 200 || body.isEmpty ? nil : try? JSONDecoder().decode(Body.self, from: Data(body))
        reason = decoded?.reason
        timestamp = decoded?.timestamp
    }

    /// What the provider does about it.
    enum Action: Equatable {
        case done(APNsOutcome)
        /// Try again later: 429 `TooManyRequests` (too many to one device), 500, 503.
        case retry(reason: String)
        /// 403 `ExpiredProviderToken`: close the connection (APNs leaves it unusable), mint a new token, retry.
        case renewProviderToken
        /// 429 `TooManyProviderTokenUpdates`: the connection is unusable for a while; a new one, later.
        case reconnectLater
    }

    var action: Action {
        let reason = self.reason ?? "HTTP \(status)"
        switch (status, self.reason) {
        case (200, _): return .done(.accepted(apnsID: ""))
        case (410, _): return .done(.unregistered(since: timestamp))
        case (400, "BadDeviceToken"), (400, "DeviceTokenNotForTopic"): return .done(.badDeviceToken(reason: reason))
        case (403, "ExpiredProviderToken"): return .renewProviderToken
        case (403, "InvalidProviderToken"), (403, "MissingProviderToken"):
            return .done(.providerTokenInvalid(reason: reason))
        case (429, "TooManyProviderTokenUpdates"): return .reconnectLater
        case (429, _), (500, _), (503, _): return .retry(reason: reason)
        default: return .done(.rejected(status: status, reason: reason))
        }
    }
}
