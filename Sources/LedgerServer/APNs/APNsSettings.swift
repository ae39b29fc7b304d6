import Crypto
import Foundation
import LedgerCore
import LedgerStore
import NIOSSL
// On Linux, `stat` and its fields are declared by the C module under Dispatch, which MemberImportVisibility
// asks to be imported by name.
#if canImport(CDispatch)
    import CDispatch
#endif
#if canImport(CoreFoundation)
    import CoreFoundation
#endif

/// A project's APNs provider settings, the config file's `projects.<name>.apns`:
///
/// ```json
/// {"teamId": "ABCDE12345", "keyId": "KEY1234567", "keyFile": "/etc/topicledger/AuthKey_KEY1234567.p8",
///  "topic": "com.example.app", "endpoint": "https://api.push.apple.com",
///  "sandboxEndpoint": "https://api.sandbox.push.apple.com", "caFile": "/path/extra-roots.pem",
///  "broadcast": true, "channelEndpoint": "https://api-manage-broadcast.push.apple.com:2196",
///  "broadcastEndpoint": "https://api.push.apple.com"}
/// ```
///
/// The first four keys are required; the endpoints default to Apple's hosts; `caFile` adds trusted roots (a
/// relay, a stand-in). `broadcast` (default false) opts the project into iOS 18 broadcast channels: its topics may
/// get a channel at `channelEndpoint` (Apple's channel management host), and their Live Activity sends go to
/// `broadcastEndpoint` as one broadcast. Both name one APNs environment, production by default; a project that
/// broadcasts in the sandbox names Apple's sandbox hosts. ``init(section:broadcast:field:)`` checks the shape;
/// ``load()`` reads the files, at start.
public struct APNsSettings: Sendable, Equatable {
    public static let productionEndpoint = "https://api.push.apple.com"
    public static let sandboxEndpoint = "https://api.sandbox.push.apple.com"
    /// Apple's channel management host, production ("Sending channel management requests to APNs"; the sandbox's
    /// is `https://api-manage-broadcast.sandbox.push.apple.com:2195`).
    public static let channelManagementEndpoint = "https://api-manage-broadcast.push.apple.com:2196"
    /// Where broadcasts go, production ("Sending broadcast push notification requests to APNs"; the sandbox's is
    /// ``sandboxEndpoint``).
    public static let broadcastEndpoint = "https://api.push.apple.com"

    /// The 10-character team id (the JWT's `iss`).
    public var teamID: String
    /// The 10-character id of the signing key (the JWT's `kid`).
    public var keyID: String
    /// The `.p8` file Apple issued: a P-256 key in PKCS#8 PEM.
    public var keyFile: String
    /// The app's bundle id (`apns-topic`).
    public var topic: String
    /// Where production tokens are pushed, without a path.
    public var endpoint: String = Self.productionEndpoint
    /// Where sandbox (development build) tokens are pushed.
    public var sandboxEndpoint: String = Self.sandboxEndpoint
    /// PEM certificates trusted beside the system's roots.
    public var caFile: String?
    /// Whether the project's topics may be carried by iOS 18 broadcast channels (`broadcast`, default false).
    public var broadcast: Bool = false
    /// Where channels are created, read, listed and deleted (`channelEndpoint`), without a path.
    public var channelEndpoint: String = Self.channelManagementEndpoint
    /// Where broadcasts go (`broadcastEndpoint`), without a path.
    public var broadcastEndpoint: String = Self.broadcastEndpoint
    /// Where in the config file these came from (`projects.<name>.apns`), for the messages of ``load()``.
    public var field: String

    /// The string members of the config file's `apns` object.
    static let keys = [
        "teamId", "keyId", "keyFile", "topic", "endpoint", "sandboxEndpoint", "caFile", "channelEndpoint",
        "broadcastEndpoint",
    ]
    /// Every member of the config file's `apns` object: the strings, and `broadcast` (true or false).
    static let allKeys = keys + ["broadcast"]

    /// The settings of the config file's `apns` object at `field` (its string members, already checked to be
    /// known, non-empty strings, and `broadcast`): missing required keys and malformed values are refused with the
    /// key named. The channel and broadcast endpoints are checked whether or not `broadcast` is true.
    init(section values: [String: String], broadcast: Bool = false, field: String) throws {
        func required(_ key: String) throws -> String {
            guard let value = values[key] else {
                throw LedgerCoreError(.invalidArgument, field: "\(field).\(key)", "required")
            }
            return value
        }
        teamID = try required("teamId")
        keyID = try required("keyId")
        keyFile = try required("keyFile")
        topic = try required("topic")
        caFile = values["caFile"]
        self.field = field
        for (key, id) in [("teamId", teamID), ("keyId", keyID)] where !Self.isAppleID(id) {
            throw LedgerCoreError(
                .invalidArgument, field: "\(field).\(key)", "expected 10 characters of A–Z and 0–9, as Apple shows it")
        }
        // A bundle id, possibly with Apple's suffixes (`.voip`, `.complication`): letters, digits, `.`, `-`, `_`.
        guard topic.count <= 255,
            topic.utf8.allSatisfy({ $0.isASCIIAlphanumeric || $0 == .dot || $0 == .dash || $0 == .underscore })
        else {
            throw LedgerCoreError(
                .invalidArgument, field: "\(field).topic", "expected a bundle id (letters, digits, '.', '-', '_')")
        }
        if let endpoint = values["endpoint"] {
            self.endpoint = try Self.endpoint(endpoint, field: "\(field).endpoint")
        }
        if let endpoint = values["sandboxEndpoint"] {
            self.sandboxEndpoint = try Self.endpoint(endpoint, field: "\(field).sandboxEndpoint")
        }
        if let endpoint = values["channelEndpoint"] {
            self.channelEndpoint = try Self.endpoint(endpoint, field: "\(field).channelEndpoint")
        }
        if let endpoint = values["broadcastEndpoint"] {
            self.broadcastEndpoint = try Self.endpoint(endpoint, field: "\(field).broadcastEndpoint")
        }
        self.broadcast = broadcast
    }

    /// Reads ``keyFile`` and ``caFile``, as ``loadKey()`` and ``loadTrustRoots()`` do: what `ledger serve` checks
    /// at start.
    func load() throws {
        _ = try loadKey()
        _ = try loadTrustRoots()
    }

    /// Reads ``keyFile``: a P-256 key in PKCS#8 PEM, readable by its owner and group only.
    ///
    /// - Throws: `LedgerCoreError.invalidArgument` naming the key (`….apns.keyFile`) and what is wrong.
    func loadKey() throws -> P256.Signing.PrivateKey {
        let keyField = "\(field).keyFile"
        if let problem = ConfiguredFile.problem(at: keyFile, kind: .secret) {
            throw LedgerCoreError(.invalidArgument, field: keyField, problem)
        }
        guard let data = FileManager.default.contents(atPath: keyFile), let pem = String(data: data, encoding: .utf8)
        else {
            throw LedgerCoreError(.invalidArgument, field: keyField, "\(keyFile): cannot be read")
        }
        // Apple's `.p8` is PKCS#8 (`BEGIN PRIVATE KEY`); swift-crypto would also take SEC1 (`BEGIN EC PRIVATE KEY`),
        // which is not what Apple issues.
        guard pem.contains("-----BEGIN PRIVATE KEY-----"),
            let key = try? P256.Signing.PrivateKey(pemRepresentation: pem)
        else {
            throw LedgerCoreError(
                .invalidArgument, field: keyField, "\(keyFile): not a P-256 private key in PKCS#8 PEM (an AuthKey .p8)")
        }
        return key
    }

    /// Reads ``caFile``: PEM certificates trusted beside the system's roots (none when it is not set).
    func loadTrustRoots() throws -> [NIOSSLCertificate] {
        var roots: [NIOSSLCertificate] = []
        if let caFile {
            if let problem = ConfiguredFile.problem(at: caFile, kind: .publicMaterial) {
                throw LedgerCoreError(.invalidArgument, field: "\(field).caFile", problem)
            }
            do {
                roots = try NIOSSLCertificate.fromPEMFile(caFile)
            } catch {
                throw LedgerCoreError(.invalidArgument, field: "\(field).caFile", "\(caFile): not PEM certificates")
            }
            guard !roots.isEmpty else {
                throw LedgerCoreError(.invalidArgument, field: "\(field).caFile", "\(caFile): holds no certificate")
            }
        }
        return roots
    }

    static func isAppleID(_ text: String) -> Bool {
        text.utf8.count == 10 && text.utf8.allSatisfy { ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x30 && $0 <= 0x39) }
    }

    /// `https://host[:port]`, without a path, query or user: the `/3/device/…` path is appended to it.
    private static func endpoint(_ text: String, field: String) throws -> String {
        let trimmed = text.hasSuffix("/") ? String(text.dropLast()) : text
        guard let url = URLComponents(string: trimmed), url.scheme == "https", let host = url.host, !host.isEmpty,
            url.path.isEmpty, url.query == nil, url.fragment == nil, url.user == nil
        else {
            throw LedgerCoreError(.invalidArgument, field: field, "expected https://host[:port] without a path")
        }
        return trimmed
    }
}

extension UInt8 {
    fileprivate var isASCIIAlphanumeric: Bool {
        (self >= 0x30 && self <= 0x39) || (self >= 0x41 && self <= 0x5A) || (self >= 0x61 && self <= 0x7A)
    }
    fileprivate static let dot = UInt8(ascii: "."), dash = UInt8(ascii: "-"), underscore = UInt8(ascii: "_")
}
