import Foundation
import Hummingbird
import LedgerCore

// The JSON bodies the device routes take, as `Decodable` types read by ``JSONBody/decode(_:_:limit:)``.
// Each refuses members it does not know (a misspelt field is a 400, not silently ignored) and says which
// field is wrong, as the dictionary-walking code before them did.

/// `POST /v1/projects/{p}/registrations`: `{"platform": "ios", "appId": "com.example"}`, both optional.
struct RegistrationBody: Decodable {
    static let platforms: Set = ["ios", "android", "web"]
    /// Lowercased; one of ``platforms``.
    let platform: String?
    let appID: String?
    /// The device's APNs token, for an `ios` registration only.
    let apnsToken: APNsDeviceToken?

    init(from decoder: any Decoder) throws {
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
struct APNsTokenBody: Decodable {
    let apnsToken: APNsDeviceToken

    init(from decoder: any Decoder) throws {
        let body = try decoder.container(keyedBy: BodyKey.self)
        try body.refuseUnknown(["apnsToken", "apnsSandbox"])
        guard let token = try Self.token(in: body, required: true) else {
            throw FCMError.invalidArgument("apnsToken is required", field: "apnsToken")
        }
        apnsToken = token
    }

    /// `apnsToken` (hex, 16–200 bytes) and `apnsSandbox` (a bool, default false) of `body`; `apnsSandbox`
    /// without `apnsToken` is refused.
    static func token(in body: KeyedDecodingContainer<BodyKey>, required: Bool) throws -> APNsDeviceToken? {
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

/// `POST …/messages:ack`: `{"through": "CURSOR"}`.
struct AcknowledgementBody: Decodable {
    /// The cursor as sent (a decimal string), checked by the route against the device's deliveries.
    let through: String

    init(from decoder: any Decoder) throws {
        let body = try decoder.container(keyedBy: BodyKey.self)
        try body.refuseUnknown(["through"])
        guard let through = (try? body.string("through")) ?? nil else {
            throw FCMError.invalidArgument("through must be a cursor (a decimal string)", field: "through")
        }
        self.through = through
    }
}

/// Any member name of a JSON object.
struct BodyKey: CodingKey {
    let stringValue: String
    var intValue: Int? { nil }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

extension KeyedDecodingContainer where Key == BodyKey {
    /// Throws 400 naming the first member (in byte order) that is not one of `known`.
    func refuseUnknown(_ known: Set<String>) throws {
        if let unknown = allKeys.map(\.stringValue).sorted().first(where: { !known.contains($0) }) {
            throw FCMError.invalidArgument("Unknown field \"\(unknown)\" in the request.", field: unknown)
        }
    }

    /// The string member `name`, `nil` when it is absent; 400 naming `field` (default `name`) when it is
    /// present but not a string (`null` included) or longer than `maximumBytes`.
    func string(_ name: String, maximumBytes: Int? = nil, field: String? = nil) throws -> String? {
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

extension JSONBody {
    private static let decoder = JSONDecoder()

    /// The body decoded as `Body`, after ``bytes(_:limit:)``'s checks.
    ///
    /// - Throws: 413 when larger than `limit`; 400 INVALID_ARGUMENT when empty, not JSON or not a JSON
    ///   object, and whatever `Body` refuses, naming the field.
    static func decode<Body: Decodable>(_ type: Body.Type, _ request: Request, limit: Int) async throws -> Body {
        guard let body = try await decodeIfSent(Body.self, request, limit: limit) else {
            throw FCMError.invalidArgument("Request body is empty; a JSON object is expected.")
        }
        return body
    }

    /// Checks that a body whose members do not matter (the v1 subscribe call sends `{}`) is empty or a JSON
    /// object, with ``FlatJSONObject``: `JSONDecoder`'s set-up cost for `{}` was 2.7 % of that route's
    /// samples under load (`JSONSerialization`'s 0.7 %), the byte-level reader's is below 0.1 %.
    static func requireObjectIfSent(_ request: Request, limit: Int) async throws {
        let buffer = try await bytes(request, limit: limit)
        guard buffer.readableBytes > 0 else { return }
        let problem: String? = buffer.withUnsafeReadableBytes { raw in
            let bytes = raw.assumingMemoryBound(to: UInt8.self)
            guard let first = bytes.firstIndex(where: { !Self.whitespace.contains($0) }) else {
                return "Invalid JSON payload received."
            }
            guard bytes[first] == UInt8(ascii: "{") else {
                return "Invalid JSON payload received: the body must be a JSON object."
            }
            return (try? FlatJSONObject(parsing: bytes)) == nil ? "Invalid JSON payload received." : nil
        }
        if let problem { throw FCMError.invalidArgument(problem) }
    }

    /// JSON's insignificant whitespace.
    private static let whitespace: Set<UInt8> = [0x20, 0x09, 0x0A, 0x0D]

    /// As ``decode(_:_:limit:)``, but an empty body is `nil`.
    static func decodeIfSent<Body: Decodable>(_ type: Body.Type, _ request: Request, limit: Int) async throws
        -> Body?
    {
        let buffer = try await bytes(request, limit: limit)
        guard buffer.readableBytes > 0 else { return nil }
        do {
            return try decoder.decode(Body.self, from: Data(buffer.readableBytesView))
        } catch let error as FCMError {
            throw error
        } catch DecodingError.typeMismatch(_, let context) where context.codingPath.isEmpty {
            throw FCMError.invalidArgument("Invalid JSON payload received: the body must be a JSON object.")
        } catch {
            throw FCMError.invalidArgument("Invalid JSON payload received.")
        }
    }
}
