import LedgerCore

// The JSON bodies the server answers with, as `Encodable` types written by ``JSONResponse/encoded(_:status:)``
// (keys sorted, as `JSONSerialization` wrote them before). Optional members that are `nil` are left out.

/// `{}`: what a successful change with nothing to report answers.
struct EmptyBody: Encodable {}

/// `{"name":"projects/p/messages/123"}`: a send's answer.
struct MessageName: Encodable {
    let name: String

    /// The body, byte for byte what `JSONResponse.encoded` writes (tested): written directly because
    /// `JSONEncoder` was 2 % of the server's samples under the topic-send load.
    var json: [UInt8] {
        var object = JSONObjectWriter()
        object.field("name", string: name)
        return object.finishBytes()
    }
}

/// `{"token":"…"}`: a registration's answer.
struct IssuedToken: Encodable {
    let token: String
}

/// An FCM v1 topic subscription resource.
struct TopicSubscriptionResource: Encodable {
    let name: String
    let topicName: String
    let createTime: String

    init(project: ProjectID, token: RegistrationToken, topic: TopicName, created: LedgerTime) {
        name = "projects/\(project)/registrations/\(token.rawValue)/topicSubscriptions/\(topic.rawValue)"
        topicName = topic.rawValue
        createTime = created.rfc3339
    }

    /// The body, byte for byte what `JSONResponse.encoded` writes (keys sorted; tested): written directly
    /// because `JSONEncoder` was 3 % of the server's samples under the per-token subscribe load.
    var json: [UInt8] {
        var object = JSONObjectWriter()
        object.field("createTime", string: createTime)
        object.field("name", string: name)
        object.field("topicName", string: topicName)
        return object.finishBytes()
    }
}

/// A page of an instance's topic subscriptions.
struct TopicSubscriptionPage: Encodable {
    let topicSubscriptions: [TopicSubscriptionResource]
    let nextPageToken: String?
}

/// A page of the project's topics with their subscriber counts.
struct TopicPage: Encodable {
    struct Entry: Encodable {
        let name: String
        let subscriberCount: Int
    }
    let topics: [Entry]
    let nextPageToken: String?
}

/// `GET /iid/info/{token}`: the instance's application, platform and, with `details=true`, its topics.
struct InstanceInfo: Encodable {
    struct Relations: Encodable {
        let topics: [String: AddDate]
    }
    struct AddDate: Encodable {
        let addDate: String
    }
    let application: String?
    let platform: String?
    let rel: Relations?
}

/// The Google API error shape: `{"error":{"code":…,"message":…,"status":…,"details":[…]}}`.
struct GoogleErrorBody: Encodable {
    struct Status: Encodable {
        let code: Int
        let message: String
        let status: String
        /// Left out when empty.
        let details: [Detail]?
    }

    /// One `google.rpc` detail; `@type` names which.
    enum Detail: Encodable {
        case fcmError(errorCode: String)
        case requestInfo(requestID: String)
        case badRequest(fieldViolations: [(field: String, description: String)])

        private struct Key: CodingKey {
            let stringValue: String
            var intValue: Int? { nil }
            init(_ string: String) { stringValue = string }
            init?(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }

        private struct Violation: Encodable {
            let description: String
            let field: String
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Key.self)
            switch self {
            case .fcmError(let errorCode):
                try container.encode("type.googleapis.com/google.firebase.fcm.v1.FcmError", forKey: Key("@type"))
                try container.encode(errorCode, forKey: Key("errorCode"))
            case .requestInfo(let requestID):
                try container.encode("type.googleapis.com/google.rpc.RequestInfo", forKey: Key("@type"))
                try container.encode(requestID, forKey: Key("requestId"))
            case .badRequest(let violations):
                try container.encode("type.googleapis.com/google.rpc.BadRequest", forKey: Key("@type"))
                try container.encode(
                    violations.map { Violation(description: $0.description, field: $0.field) },
                    forKey: Key("fieldViolations"))
            }
        }
    }

    let error: Status
}

/// The legacy Instance ID error shape: `{"error":"INVALID_ARGUMENT"}`.
struct InstanceIDErrorBody: Encodable {
    let error: String
}

/// `/healthz` and `/readyz`: `{"status":"ok"}`, or `unavailable` with the reasons.
struct HealthStatus: Encodable {
    let status: String
    let reasons: [String]?
}

/// A device's delivery cursor after an acknowledgement (a seq, as a string like every 64-bit id).
struct AcknowledgedThrough: Encodable {
    let acknowledgedThrough: String
}
