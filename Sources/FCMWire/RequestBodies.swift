import Foundation
import LedgerCore

// The JSON bodies the device routes take, as `Decodable` types (the server reads them with `JSONBody.decode`).
// Each refuses members it does not know (a misspelt field is a 400, not silently ignored) and says which
// field is wrong, as the dictionary-walking code before them did.

/// `POST /v1/projects/{p}/registrations`: `{"platform": "ios", "appId": "com.example"}`, both optional.
public struct RegistrationBody: Decodable {
    public static let platforms: Set = ["ios", "android", "web"]
    /// Lowercased; one of ``platforms``.
    public let platform: String?
    public let appID: String?
    /// The device's APNs token, for an `ios` registration only.
    public let apnsToken: APNsDeviceToken?

    public init(from decoder: any Decoder) throws {
        let body = try decoder.container(keyedBy: BodyKey.self)
        try body.refuseUnknown(["platform", "appId", "app_id", "apnsToken", "apnsSandbox"])
        platform = try body.string("platform", maximumBytes: 256)?.lowercased()
        if let platform, !Self.platforms.contains(platform) {
            throw FCMError.invalidArgument("platform must be one of ios, android or web", field: "platform")
        }
        appID = try body.string("appId", maximumBytes: 256) ?? body.string("app_id", maximumBytes: 256, field: "appId")
        apnsToken = try APNsTokenBody.token(in: body, required: false)
        if apnsToken != nil, platform != "ios" {
            throw FCMError.invalidArgument(
                "an APNs token belongs to a registration whose platform is ios", field: "apnsToken")
        }
    }
}

/// `PUT …/registrations/{token}/apnsToken`: `{"apnsToken": "<hex>", "apnsSandbox": false}`.
public struct APNsTokenBody: Decodable {
    public let apnsToken: APNsDeviceToken

    public init(from decoder: any Decoder) throws {
        let body = try decoder.container(keyedBy: BodyKey.self)
        try body.refuseUnknown(["apnsToken", "apnsSandbox"])
        guard let token = try Self.token(in: body, required: true) else {
            throw FCMError.invalidArgument("apnsToken is required", field: "apnsToken")
        }
        apnsToken = token
    }

    /// `apnsToken` (hex, 16–200 bytes) and `apnsSandbox` (a bool, default false) of `body`; `apnsSandbox`
    /// without `apnsToken` is refused.
    public static func token(in body: KeyedDecodingContainer<BodyKey>, required: Bool) throws -> APNsDeviceToken? {
        let sandboxKey = BodyKey(stringValue: "apnsSandbox")
        var sandbox = false
        if body.contains(sandboxKey) {
            guard let value = try? body.decode(Bool.self, forKey: sandboxKey) else {
                throw FCMError.invalidArgument("apnsSandbox must be true or false", field: "apnsSandbox")
            }
            sandbox = value
        }
        guard let hex = try body.string("apnsToken", maximumBytes: 2 * APNsDeviceToken.byteRange.upperBound) else {
            if required { throw FCMError.invalidArgument("apnsToken is required", field: "apnsToken") }
            if body.contains(sandboxKey) {
                throw FCMError.invalidArgument("apnsSandbox needs an apnsToken", field: "apnsSandbox")
            }
            return nil
        }
        do {
            return try APNsDeviceToken(hex: hex, sandbox: sandbox)
        } catch {
            throw FCMError.invalidArgument(error)
        }
    }
}

/// `PUT …/registrations/{token}/liveActivities/{topic}` and `PUT …/registrations/{token}/pushToStartTokens/{type}`:
/// `{"pushToken": "<hex>"}`, an ActivityKit token (an activity's push token, or a push-to-start token) as
/// ActivityKit gives its bytes, in hex: 16 to 200 bytes, as an APNs device token.
public struct ActivityTokenBody: Decodable {
    public let pushToken: APNsDeviceToken

    public init(from decoder: any Decoder) throws {
        let body = try decoder.container(keyedBy: BodyKey.self)
        try body.refuseUnknown(["pushToken"])
        guard let hex = try body.string("pushToken", maximumBytes: 2 * APNsDeviceToken.byteRange.upperBound) else {
            throw FCMError.invalidArgument("pushToken is required", field: "pushToken")
        }
        do {
            // Held without an environment: it is pushed in the device's (its APNs token's).
            pushToken = try APNsDeviceToken(hex: hex, sandbox: false)
        } catch {
            throw FCMError.invalidArgument(
                "pushToken must be an ActivityKit token in hex: an even number of hex digits,"
                    + " \(2 * APNsDeviceToken.byteRange.lowerBound) to \(2 * APNsDeviceToken.byteRange.upperBound)",
                field: "pushToken")
        }
    }
}

/// `POST …/messages:ack`: `{"through": "CURSOR"}`.
public struct AcknowledgementBody: Decodable {
    /// The cursor as sent (a decimal string), checked by the route against the device's deliveries.
    public let through: String

    public init(from decoder: any Decoder) throws {
        let body = try decoder.container(keyedBy: BodyKey.self)
        try body.refuseUnknown(["through"])
        guard let through = (try? body.string("through")) ?? nil else {
            throw FCMError.invalidArgument("through must be a cursor (a decimal string)", field: "through")
        }
        self.through = through
    }
}

/// Any member name of a JSON object.
public struct BodyKey: CodingKey {
    public let stringValue: String
    public var intValue: Int? { nil }
    public init(stringValue: String) { self.stringValue = stringValue }
    public init?(intValue: Int) { nil }
}

extension KeyedDecodingContainer where Key == BodyKey {
    /// Throws 400 naming the first member (in byte order) that is not one of `known`.
    public func refuseUnknown(_ known: Set<String>) throws {
        if let unknown = allKeys.map(\.stringValue).sorted().first(where: { !known.contains($0) }) {
            throw FCMError.invalidArgument("Unknown field \"\(unknown)\" in the request.", field: unknown)
        }
    }

    /// The string member `name`, `nil` when it is absent; 400 naming `field` (default `name`) when it is
    /// present but not a string (`null` included) or longer than `maximumBytes`.
    public func string(_ name: String, maximumBytes: Int? = nil, field: String? = nil) throws -> String? {
        let key = BodyKey(stringValue: name)
        guard contains(key) else { return nil }
        guard let text = try? decode(String.self, forKey: key), text.utf8.count <= maximumBytes ?? Int.max else {
            let field = field ?? name
            let limit = maximumBytes.map { " of at most \($0) bytes" } ?? ""
            throw FCMError.invalidArgument("\(field) must be a string\(limit)", field: field)
        }
        return text
    }
}

/// `POST …/registrations/{token}:erase`: `{"reason": "…"}`, and `POST …/registrations:batchErase`:
/// `{"registrationTokens": ["…", …], "reason": "…"}` (`registration_tokens` too), at most
/// ``maximumTokens`` tokens. The reason is required: it is what the log keeps of why.
public struct ErasureBody: Decodable {
    public static let maximumTokens = 1000
    public static let maximumReasonBytes = 1024
    public let reason: String
    /// The batch's tokens (empty for the single-token route, whose token is in the path).
    public let registrationTokens: [String]

    public init(from decoder: any Decoder) throws {
        let body = try decoder.container(keyedBy: BodyKey.self)
        try body.refuseUnknown(["reason", "registrationTokens", "registration_tokens"])
        guard let reason = try body.string("reason", maximumBytes: Self.maximumReasonBytes),
            !reason.allSatisfy(\.isWhitespace)
        else {
            throw FCMError.invalidArgument("reason is required: why the device is erased", field: "reason")
        }
        self.reason = reason
        let key = [BodyKey(stringValue: "registrationTokens"), BodyKey(stringValue: "registration_tokens")]
            .first(where: body.contains)
        guard let key else {
            registrationTokens = []
            return
        }
        guard let tokens = try? body.decode([String].self, forKey: key) else {
            throw FCMError.invalidArgument("registrationTokens must be an array of strings", field: key.stringValue)
        }
        guard (1...Self.maximumTokens).contains(tokens.count) else {
            throw FCMError.invalidArgument(
                "registrationTokens must hold 1 to \(Self.maximumTokens) tokens", field: key.stringValue)
        }
        registrationTokens = tokens
    }
}
