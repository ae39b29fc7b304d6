import LedgerCore

/// `POST /v1/projects/{p}/topics/{topic}:createLiveActivityChannel`: `{"messageStoragePolicy": 0}` (also
/// `message_storage_policy`), Apple's message storage policy of the new channel: 0, Apple stores nothing (a
/// broadcast no device is reachable for is dropped), or 1, Apple stores the latest broadcast. Required: it cannot be
/// changed once Apple has made the channel.
///
/// Read by ``FlatJSONObject``, not `JSONDecoder`: the policy is the JSON integer `0` or `1` and nothing else, and
/// `JSONDecoder` reads `1.0`, `1e0` and `10e-1` as the `Int` 1. The server hands it bytes that passed
/// ``StrictJSON`` (UTF-8, no name given twice), as every body.
public struct LiveActivityChannelBody: Sendable, Equatable {
    /// Apple's policies ("Sending channel management requests to APNs": `message-storage-policy`).
    public static let policies: ClosedRange<Int64> = 0...1
    /// The member names the body may have.
    public static let names = ["messageStoragePolicy", "message_storage_policy"]
    public let messageStoragePolicy: Int

    /// Reads a body.
    ///
    /// - Throws: `FCMError` 400 INVALID_ARGUMENT: bytes that are not one JSON object; an unknown member (naming the
    ///   first in code-point order, as every body does); the policy missing, given in both spellings, or any value
    ///   but the integer `0` or `1` (naming the member as given: `true`, `"0"`, `1.0`, `1e0`, `null` are refused).
    public init(json bytes: UnsafeBufferPointer<UInt8>) throws {
        guard bytes.first(where: { !Self.whitespace.contains($0) }) == UInt8(ascii: "{") else {
            throw FCMError.invalidArgument("Invalid JSON payload received: the body must be a JSON object.")
        }
        let object: FlatJSONObject
        do {
            object = try FlatJSONObject(parsing: bytes)
        } catch {
            throw FCMError.invalidArgument("Invalid JSON payload received: \(error).")
        }
        if let unknown = object.members.map(\.name).sorted().first(where: { !Self.names.contains($0) }) {
            throw FCMError.invalidArgument("Unknown field \"\(unknown)\" in the request.", field: unknown)
        }
        let given = Self.names.filter { object[$0] != nil }
        guard let name = given.first else {
            throw FCMError.invalidArgument(
                "messageStoragePolicy is required: 0 (Apple stores nothing) or 1 (Apple stores the latest broadcast)",
                field: "messageStoragePolicy")
        }
        guard given.count == 1 else {
            throw FCMError.invalidArgument(
                "give messageStoragePolicy once (not also message_storage_policy)", field: "messageStoragePolicy")
        }
        // `.integer` is a number without fraction or exponent that fits in 64 bits: range-checked before it is
        // converted, so nothing from the body can trap.
        guard case .integer(let value)? = object[name], Self.policies.contains(value) else {
            throw FCMError.invalidArgument(
                "messageStoragePolicy must be the integer 0 (Apple stores nothing) or 1 (Apple stores the latest broadcast)",
                field: name)
        }
        messageStoragePolicy = Int(value)
    }

    /// JSON's insignificant whitespace.
    private static let whitespace: Set<UInt8> = [0x20, 0x09, 0x0A, 0x0D]
}
