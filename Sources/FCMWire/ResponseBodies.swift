import LedgerCore

// The JSON bodies the server answers with, as `Encodable` types written by ``JSONResponse/encoded(_:status:)``
// (keys sorted, as `JSONSerialization` wrote them before). Optional members that are `nil` are left out.

/// `{}`: what a successful change with nothing to report answers.
public struct EmptyBody: Encodable {
    public init() {}
}

/// `{"name":"projects/p/messages/123"}`: a send's answer.
public struct MessageName: Encodable {
    public let name: String

    /// The body, byte for byte what `JSONResponse.encoded` writes (tested): written directly because
    /// `JSONEncoder` was 2 % of the server's samples under the topic-send load.
    public var json: [UInt8] {
        var object = JSONObjectWriter()
        object.field("name", string: name)
        return object.finishBytes()
    }

    public init(name: String) {
        self.name = name
    }
}

/// `{"token":"…"}`: a registration's answer.
public struct IssuedToken: Encodable {
    public let token: String

    public init(token: String) {
        self.token = token
    }
}

/// An FCM v1 topic subscription resource.
public struct TopicSubscriptionResource: Encodable {
    public let name: String
    public let topicName: String
    public let createTime: String

    public init(project: ProjectID, token: RegistrationToken, topic: TopicName, created: LedgerTime) {
        name = "projects/\(project)/registrations/\(token.rawValue)/topicSubscriptions/\(topic.rawValue)"
        topicName = topic.rawValue
        createTime = created.rfc3339
    }

    /// The body, byte for byte what `JSONResponse.encoded` writes (keys sorted; tested): written directly
    /// because `JSONEncoder` was 3 % of the server's samples under the per-token subscribe load.
    public var json: [UInt8] {
        var object = JSONObjectWriter()
        object.field("createTime", string: createTime)
        object.field("name", string: name)
        object.field("topicName", string: topicName)
        return object.finishBytes()
    }
}

/// A page of an instance's topic subscriptions.
public struct TopicSubscriptionPage: Encodable {
    public let topicSubscriptions: [TopicSubscriptionResource]
    public let nextPageToken: String?

    public init(topicSubscriptions: [TopicSubscriptionResource], nextPageToken: String?) {
        self.topicSubscriptions = topicSubscriptions
        self.nextPageToken = nextPageToken
    }
}

/// A page of the project's topics with their subscriber counts.
public struct TopicPage: Encodable {
    public struct Entry: Encodable {
        public let name: String
        public let subscriberCount: Int

        public init(name: String, subscriberCount: Int) {
            self.name = name
            self.subscriberCount = subscriberCount
        }
    }
    public let topics: [Entry]
    public let nextPageToken: String?

    public init(topics: [Entry], nextPageToken: String?) {
        self.topics = topics
        self.nextPageToken = nextPageToken
    }
}

/// `GET /iid/info/{token}`: the instance's application, platform and, with `details=true`, its topics.
public struct InstanceInfoBody: Encodable {
    public struct Relations: Encodable {
        public let topics: [String: AddDate]

        public init(topics: [String: AddDate]) {
            self.topics = topics
        }
    }
    public struct AddDate: Encodable {
        public let addDate: String

        public init(addDate: String) {
            self.addDate = addDate
        }
    }
    public let application: String?
    public let platform: String?
    public let rel: Relations?

    public init(application: String?, platform: String?, rel: Relations?) {
        self.application = application
        self.platform = platform
        self.rel = rel
    }
}

/// The Google API error shape: `{"error":{"code":…,"message":…,"status":…,"details":[…]}}`.
public struct GoogleErrorBody: Encodable {
    public struct Status: Encodable {
        public let code: Int
        public let message: String
        public let status: String
        /// Left out when empty.
        public let details: [Detail]?

        public init(code: Int, message: String, status: String, details: [Detail]?) {
            self.code = code
            self.message = message
            self.status = status
            self.details = details
        }
    }

    /// One `google.rpc` detail; `@type` names which.
    public enum Detail: Encodable {
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

        public func encode(to encoder: any Encoder) throws {
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

    public let error: Status

    public init(error: Status) {
        self.error = error
    }
}

/// The legacy Instance ID error shape: `{"error":"INVALID_ARGUMENT"}`.
public struct InstanceIDErrorBody: Encodable {
    public let error: String

    public init(error: String) {
        self.error = error
    }
}

/// `/healthz` and `/readyz`: `{"status":"ok"}`, or `unavailable` with the reasons.
public struct HealthStatus: Encodable {
    public let status: String
    public let reasons: [String]?

    public init(status: String, reasons: [String]?) {
        self.status = status
        self.reasons = reasons
    }
}

/// A device's delivery cursor after an acknowledgement (a seq, as a string like every 64-bit id).
public struct AcknowledgedThrough: Encodable {
    public let acknowledgedThrough: String

    public init(acknowledgedThrough: String) {
        self.acknowledgedThrough = acknowledgedThrough
    }
}

/// One erasure's answer: the pseudonym the device has from now on, the seq of its `erased` event and how
/// many earlier events it rewrote — or, in a batch, why the token was not erased.
public struct ErasureResult: Encodable {
    public let pseudonym: String?
    public let erasedAtSeq: String?
    public let redactedEvents: String?
    public let error: String?

    public init(pseudonym: String, erasedAtSeq: UInt64, redactedEvents: UInt64) {
        self.pseudonym = pseudonym
        self.erasedAtSeq = String(erasedAtSeq)
        self.redactedEvents = String(redactedEvents)
        self.error = nil
    }

    public init(error: String) {
        (pseudonym, erasedAtSeq, redactedEvents) = (nil, nil, nil)
        self.error = error
    }
}

/// `POST …/registrations:batchErase`'s answer: one result per token, in order.
public struct ErasureResults: Encodable {
    public let results: [ErasureResult]

    public init(results: [ErasureResult]) {
        self.results = results
    }
}
