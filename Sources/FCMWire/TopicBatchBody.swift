import LedgerCore

/// The body of the Instance ID API's `v1:batchAdd` and `v1:batchRemove`:
/// `{"to":"/topics/T","registration_tokens":["…", …]}` (`registrationTokens` also accepted).
///
/// Read by ``FlatJSONObject``, not `JSONDecoder`: `JSONDecoder` accepts what FCM refuses — a comma before `]`
/// or `}`, numbers beyond a Double, a bad escape in a member it is not asked for — and is no faster (the
/// byte-level reader reads a 1,000-token body 1.08 times as fast: docs/performance.md, the batch body row).
/// It is tested against `JSONDecoder` decoding ``Decoded`` on random and malformed bodies: the two agree
/// wherever the body is JSON.
public struct TopicBatchBody: Sendable, Equatable {
    /// `to`, as given (the route validates it as a topic).
    public var to: String
    /// The tokens in order; `nil` for an element that is not a string (its own INVALID_ARGUMENT).
    public var registrationTokens: [String?]

    public init(to: String, registrationTokens: [String?]) {
        self.to = to
        self.registrationTokens = registrationTokens
    }

    /// Reads a body; `nil` when it is not JSON, not an object, or lacks a string `to` or an array of tokens.
    public init?(json bytes: UnsafeBufferPointer<UInt8>) {
        guard let object = try? FlatJSONObject(parsing: bytes), case .string(let to)? = object["to"],
            case .strings(let tokens)? = object["registrationTokens"] ?? object["registration_tokens"]
        else { return nil }
        self.init(to: to, registrationTokens: tokens)
    }

    /// The same shape for `JSONDecoder` (what the byte-level reader is tested against).
    public struct Decoded: Decodable {
        public let body: TopicBatchBody

        private enum Keys: String, CodingKey {
            case to, registrationTokens, registration_tokens
        }

        /// Any JSON value, passed over.
        private struct Skipped: Decodable {
            init(from decoder: any Decoder) throws {}
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: Keys.self)
            let to = try container.decode(String.self, forKey: .to)
            var array = try container.nestedUnkeyedContainer(
                forKey: container.contains(.registrationTokens) ? .registrationTokens : .registration_tokens)
            var tokens: [String?] = []
            while !array.isAtEnd {
                if let token = try? array.decode(String.self) {
                    tokens.append(token)
                } else {
                    _ = try array.decode(Skipped.self)
                    tokens.append(nil)
                }
            }
            body = TopicBatchBody(to: to, registrationTokens: tokens)
        }
    }
}
