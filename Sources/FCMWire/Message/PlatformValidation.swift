import LedgerCore

import Foundation

/// The platform configurations of a v1 message — `android`, `apns`, `webpush` and `fcm_options` — checked
/// against the FCM v1 proto types (`AndroidConfig`, `AndroidNotification`, `ApnsConfig`, `WebpushConfig`,
/// `FcmOptions`), the way FCM refuses them: an unknown field, a value of the wrong type or an enum value
/// the proto does not have is a 400 naming the field. Field names are accepted in the proto's snake_case
/// and in lowerCamelCase, as proto JSON parsing accepts both; giving one field both ways is refused.
///
/// Values the server reads back are checked more closely: TTLs, APNs and Web Push headers, the `aps`
/// dictionary, the Web Push link. `Struct` fields (`apns.payload`, `webpush.notification`) may hold any
/// JSON object.
enum PlatformValidation {
    // The field tables are built per call, not kept in globals: an indirect enum's boxes, referenced from a
    // global through tagged pointers, read as leaks to LeakSanitizer (which the fuzz targets run under).
    indirect enum FieldType {
        case string
        case bool
        case int32
        case duration
        case stringMap
        case stringArray
        case durationArray
        /// Any JSON object (a proto `Struct`).
        case anyObject
        case oneOf(Set<String>, caseInsensitive: Bool)
        case object([String: FieldType])
    }

    static var androidNotification: [String: FieldType] {
        [
            "title": .string, "body": .string, "icon": .string, "color": .string, "sound": .string, "tag": .string,
            "click_action": .string, "body_loc_key": .string, "body_loc_args": .stringArray, "title_loc_key": .string,
            "title_loc_args": .stringArray, "channel_id": .string, "ticker": .string, "sticky": .bool,
            "event_time": .string, "local_only": .bool,
            "notification_priority": .oneOf(
                [
                    "PRIORITY_UNSPECIFIED", "PRIORITY_MIN", "PRIORITY_LOW", "PRIORITY_DEFAULT", "PRIORITY_HIGH",
                    "PRIORITY_MAX",
                ],
                caseInsensitive: false),
            "default_sound": .bool, "default_vibrate_timings": .bool, "default_light_settings": .bool,
            "vibrate_timings": .durationArray,
            "visibility": .oneOf(["VISIBILITY_UNSPECIFIED", "PRIVATE", "PUBLIC", "SECRET"], caseInsensitive: false),
            "notification_count": .int32, "light_settings": .anyObject, "image": .string,
            "bypass_proxy_notification": .bool,
            "proxy": .oneOf(["PROXY_UNSPECIFIED", "ALLOW", "DENY", "IF_PRIORITY_LOWERED"], caseInsensitive: false),
        ]
    }

    static var android: [String: FieldType] {
        [
            "collapse_key": .string,
            // The proto's enum is NORMAL/HIGH; the Admin SDKs send "normal"/"high", which FCM accepts.
            "priority": .oneOf(["normal", "high"], caseInsensitive: true),
            "ttl": .duration, "restricted_package_name": .string, "data": .stringMap,
            "notification": .object(androidNotification), "fcm_options": .object(["analytics_label": .string]),
            "direct_boot_ok": .bool, "bandwidth_constrained_ok": .bool, "restricted_satellite_ok": .bool,
        ]
    }

    static var apns: [String: FieldType] {
        [
            "headers": .stringMap, "payload": .anyObject,
            "fcm_options": .object(["analytics_label": .string, "image": .string]), "live_activity_token": .string,
        ]
    }

    static var webpush: [String: FieldType] {
        [
            "headers": .stringMap, "data": .stringMap, "notification": .anyObject,
            "fcm_options": .object(["link": .string, "analytics_label": .string]),
        ]
    }

    static var fcmOptions: [String: FieldType] { ["analytics_label": .string] }

    /// APNs push types (the `apns-push-type` header).
    static let pushTypes: Set<String> = [
        "alert", "background", "location", "voip", "complication", "fileprovider", "mdm", "liveactivity",
        "pushtotalk", "widgets", "controls",
    ]

    /// Checks `message`'s platform configurations; `message.fcm_options` and `message.fcmOptions` alike.
    static func validate(_ message: [String: JSONValue]) throws(LedgerCoreError) {
        if let android = message["android"] {
            try check(android, as: .object(Self.android), path: "message.android")
            if let data = field(android, "data") {
                try MessageValidation.checkDataKeys(data, path: "message.android.data")
            }
        }
        if let apns = message["apns"] {
            try check(apns, as: .object(Self.apns), path: "message.apns")
            try checkAPNs(apns.object ?? [:])
        }
        if let webpush = message["webpush"] {
            try check(webpush, as: .object(Self.webpush), path: "message.webpush")
            try checkWebpush(webpush.object ?? [:])
        }
        if message["fcm_options"] != nil && message["fcmOptions"] != nil {
            throw LedgerCoreError(
                .invalidArgument, field: "message.fcm_options", "fcm_options is given twice (as fcmOptions too)")
        }
        if let options = message["fcm_options"] ?? message["fcmOptions"] {
            try check(options, as: .object(fcmOptions), path: "message.fcm_options")
        }
    }

    // MARK: Types

    static func check(_ value: JSONValue, as type: FieldType, path: String) throws(LedgerCoreError) {
        func refuse(_ what: String) -> LedgerCoreError {
            LedgerCoreError(.invalidArgument, field: path, "\(path.split(separator: ".").last ?? "") must be \(what)")
        }
        switch type {
        case .string:
            guard value.string != nil else { throw refuse("a string") }
        case .bool:
            guard value.isBoolean else { throw refuse("true or false") }
        case .int32:
            guard let integer = value.integer, Int32(exactly: integer) != nil else { throw refuse("a 32-bit integer") }
        case .duration:
            guard let text = value.string, MessageLifetimeBounds.microseconds(ofDuration: text) != nil else {
                throw refuse("a duration in seconds like \"3600s\" or \"3.5s\", from 0 to 2419200s (4 weeks)")
            }
        case .stringMap:
            guard let map = value.object else { throw refuse("an object of strings") }
            for (key, member) in map where member.string == nil {
                throw LedgerCoreError(
                    .invalidArgument, field: "\(path).\(key)", "the values of \(path) must be strings")
            }
        case .stringArray, .durationArray:
            guard let array = value.array else { throw refuse("an array") }
            for (index, element) in array.enumerated() {
                try check(element, as: type.isDurationArray ? .duration : .string, path: "\(path)[\(index)]")
            }
        case .anyObject:
            guard value.object != nil else { throw refuse("an object") }
        case .oneOf(let allowed, let caseInsensitive):
            guard let text = value.string,
                allowed.contains(caseInsensitive ? text.lowercased() : text)
            else { throw refuse("one of \(allowed.sorted().joined(separator: ", "))") }
        case .object(let fields):
            guard let object = value.object else { throw refuse("an object") }
            var seen: Set<String> = []
            for (key, member) in object {
                let name = fields[key] != nil ? key : snakeCase(key)
                guard let fieldType = fields[name] else {
                    throw LedgerCoreError(
                        .invalidArgument, field: "\(path).\(key)", "unknown field \"\(key)\" in \(path)")
                }
                guard seen.insert(name).inserted else {
                    throw LedgerCoreError(
                        .invalidArgument, field: "\(path).\(key)",
                        "\(path).\(name) is given twice (snake_case and camelCase)")
                }
                try check(member, as: fieldType, path: "\(path).\(name)")
            }
        }
    }

    // MARK: Values the server reads back

    /// Refuses two header names that differ only in case (`apns-push-type` and `APNS-Push-Type`): HTTP header names
    /// are case-insensitive, so which one the server read would depend on a dictionary's order, and the message
    /// would not mean one thing (a push's type, a Live Activity or not) once stored.
    private static func checkDistinctHeaderNames(_ headers: [String: JSONValue]?, path: String)
        throws(LedgerCoreError)
    {
        var seen = Set<String>()
        for name in (headers ?? [:]).keys.sorted() where !seen.insert(name.lowercased()).inserted {
            throw LedgerCoreError(
                .invalidArgument, field: "\(path).\(name)",
                "header \(name) is given twice (header names are case-insensitive)")
        }
    }

    private static func checkAPNs(_ apns: [String: JSONValue]) throws(LedgerCoreError) {
        try checkDistinctHeaderNames(field(.object(apns), "headers")?.object, path: "message.apns.headers")
        for (name, value) in field(.object(apns), "headers")?.object ?? [:] {
            let text = value.string ?? ""
            let path = "message.apns.headers.\(name)"
            switch name.lowercased() {
            case "apns-expiration":
                guard Int64(text).map({ $0 >= 0 }) == true else {
                    throw LedgerCoreError(
                        .invalidArgument, field: path,
                        "apns-expiration must be a UNIX time in seconds (a non-negative decimal integer)")
                }
            case "apns-priority":
                guard ["1", "5", "10"].contains(text) else {
                    throw LedgerCoreError(.invalidArgument, field: path, "apns-priority must be \"10\", \"5\" or \"1\"")
                }
            case "apns-push-type":
                guard pushTypes.contains(text) else {
                    throw LedgerCoreError(
                        .invalidArgument, field: path,
                        "apns-push-type must be one of \(pushTypes.sorted().joined(separator: ", "))")
                }
            case "apns-collapse-id":
                guard text.utf8.count <= 64 else {
                    throw LedgerCoreError(.invalidArgument, field: path, "apns-collapse-id must be at most 64 bytes")
                }
            default: break
            }
        }
        guard let payload = apns["payload"]?.object else { return }
        for key in payload.keys where key != "aps" && MessageValidation.isReservedDataKey(key) {
            throw LedgerCoreError(
                .invalidArgument, field: "message.apns.payload.\(key)", "apns.payload key \"\(key)\" is reserved")
        }
        guard let aps = payload["aps"] else { return }
        guard let aps = aps.object else {
            throw LedgerCoreError(.invalidArgument, field: "message.apns.payload.aps", "aps must be an object")
        }
        for (key, value) in aps {
            let path = "message.apns.payload.aps.\(key)"
            switch key {
            case "alert", "sound":
                guard value.string != nil || value.object != nil else {
                    throw LedgerCoreError(.invalidArgument, field: path, "\(key) must be a string or an object")
                }
            case "badge", "content-available", "mutable-content":
                guard value.integer != nil else {
                    throw LedgerCoreError(.invalidArgument, field: path, "\(key) must be an integer")
                }
            case "category", "thread-id", "target-content-id", "interruption-level", "filter-criteria":
                guard value.string != nil else {
                    throw LedgerCoreError(.invalidArgument, field: path, "\(key) must be a string")
                }
            default: break
            }
        }
    }

    private static let urgencies: Set<String> = ["very-low", "low", "normal", "high"]

    private static func checkWebpush(_ webpush: [String: JSONValue]) throws(LedgerCoreError) {
        if let data = webpush["data"] { try MessageValidation.checkDataKeys(data, path: "message.webpush.data") }
        try checkDistinctHeaderNames(webpush["headers"]?.object, path: "message.webpush.headers")
        for (name, value) in webpush["headers"]?.object ?? [:] {
            let text = value.string ?? ""
            let path = "message.webpush.headers.\(name)"
            switch name.lowercased() {
            case "ttl":
                guard MessageLifetimeBounds.seconds(ofWebPushTTL: text) != nil else {
                    throw LedgerCoreError(
                        .invalidArgument, field: path, "TTL must be a non-negative decimal number of seconds")
                }
            case "urgency":
                guard urgencies.contains(text.lowercased()) else {
                    throw LedgerCoreError(
                        .invalidArgument, field: path, "Urgency must be one of very-low, low, normal, high")
                }
            default: break
            }
        }
        if let link = field(.object(webpush), "fcm_options").flatMap({ field($0, "link") })?.string {
            guard let url = URL(string: link), url.scheme?.lowercased() == "https", url.host?.isEmpty == false else {
                throw LedgerCoreError(
                    .invalidArgument, field: "message.webpush.fcm_options.link", "link must be an HTTPS URL")
            }
        }
    }

    // MARK: Helpers

    /// A field of a JSON object by its proto name or its lowerCamelCase name.
    static func field(_ value: JSONValue, _ snakeCaseName: String) -> JSONValue? {
        guard let object = value.object else { return nil }
        return object[snakeCaseName] ?? object[DevicePayload.lowerCamelCase(snakeCaseName)]
    }

    /// `clickAction` → `click_action`.
    static func snakeCase(_ name: String) -> String {
        var result = ""
        for character in name {
            if character.isUppercase {
                result += "_" + character.lowercased()
            } else {
                result.append(character)
            }
        }
        return result
    }
}

extension PlatformValidation.FieldType {
    fileprivate var isDurationArray: Bool {
        if case .durationArray = self { return true }
        return false
    }
}
