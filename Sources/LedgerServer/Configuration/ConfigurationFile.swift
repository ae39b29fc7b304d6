import FCMWire
import Foundation
import LedgerCore

/// The config file of `ledger serve --config`, decoded by `JSONDecoder` after ``StrictJSON``'s checks (UTF-8, no
/// byte-order mark, no repeated names). Every object refuses members it does not know, and every refusal names
/// the file and the member's path (`config.json: projects.shop.adminKeys`), as ``ServerConfiguration/load(path:)``
/// documents.
///
/// The sections are read here as they are written; what they mean (keys hashed and checked for reuse,
/// checkpoint and APNs settings validated) is ``ServerConfiguration/load(path:)``'s to build.
struct ConfigurationFile: Decodable {
    /// Each project's section, in name order.
    let projects: [(name: String, section: ProjectSection)]
    /// Each limit given, in name order; `nil` for one that is not a whole number (a boolean, a fraction, beyond
    /// `Int`).
    let limits: [(key: String, value: Int?)]?
    let conditionPrecedence: ConditionPrecedence?
    let tls: TLSSection?
    let cluster: ClusterSection?

    /// Where the file is, for the refusals' field names (`JSONDecoder.userInfo[.configurationPath]`).
    static let pathKey = CodingUserInfoKey(rawValue: "topicledger.configurationPath")!

    init(from decoder: any Decoder) throws {
        let path = decoder.configurationPath
        guard let root = try? decoder.container(keyedBy: ConfigKey.self) else {
            throw LedgerCoreError(.invalidArgument, field: path, "expected {\"projects\": {…}}")
        }
        try root.refuseUnknown(
            ["projects", "limits", "conditionPrecedence", "tls", "cluster"],
            "unknown key; expected projects, limits, conditionPrecedence, tls or cluster", path: path)
        guard let projectsContainer = try? root.nestedContainer(keyedBy: ConfigKey.self, forKey: ConfigKey("projects"))
        else {
            throw LedgerCoreError(.invalidArgument, field: path, "expected {\"projects\": {…}}")
        }
        projects = try projectsContainer.allKeys.sorted { $0.stringValue < $1.stringValue }.map { key in
            _ = try ProjectID(key.stringValue, field: "\(path): projects.\(key.stringValue)")
            return (key.stringValue, try projectsContainer.section(ProjectSection.self, key.stringValue, path: path))
        }
        if root.contains(ConfigKey("limits")) {
            guard let container = try? root.nestedContainer(keyedBy: ConfigKey.self, forKey: ConfigKey("limits")) else {
                throw LedgerCoreError(.invalidArgument, field: "\(path): limits", "expected an object")
            }
            limits = container.allKeys.sorted { $0.stringValue < $1.stringValue }.map { key in
                (key.stringValue, try? container.decode(Int.self, forKey: key))
            }
        } else {
            limits = nil
        }
        tls = root.contains(ConfigKey("tls")) ? try root.section(TLSSection.self, "tls", path: path) : nil
        cluster =
            root.contains(ConfigKey("cluster")) ? try root.section(ClusterSection.self, "cluster", path: path) : nil
        if root.contains(ConfigKey("conditionPrecedence")) {
            guard let text = try? root.decode(String.self, forKey: ConfigKey("conditionPrecedence")),
                let precedence = ConditionPrecedence(rawValue: text)
            else {
                throw LedgerCoreError(
                    .invalidArgument, field: "\(path): conditionPrecedence", "expected left-to-right or standard")
            }
            conditionPrecedence = precedence
        } else {
            conditionPrecedence = nil
        }
    }

    /// `projects.<name>`: the keys of each role, and the project's checkpoint and APNs sections.
    struct ProjectSection: Decodable {
        let adminKeys: [String]?
        let auditorKeys: [String]?
        let clientApiKeys: [String]?
        let checkpoint: CheckpointSection?
        let apns: APNsSection?
        let registrationExpiry: RegistrationExpiry?
        let contentRetention: RetentionPeriod?
        let identifierRetention: RetentionPeriod?
        let witnesses: [WitnessSection]?
        let witnessQuorum: Int?

        /// `projects.<p>.<key>`, a retention period (``RetentionPeriod``), when given.
        private static func retention(
            _ key: String, in container: KeyedDecodingContainer<ConfigKey>, decoder: any Decoder
        ) throws -> RetentionPeriod? {
            let field = "\(decoder.configurationField).\(key)"
            guard container.contains(ConfigKey(key)) else { return nil }
            guard let text = try? container.decode(String.self, forKey: ConfigKey(key)) else {
                throw LedgerCoreError(.invalidArgument, field: field, "expected a string such as \"30d\" or \"never\"")
            }
            return try RetentionPeriod(parsing: text, field: field)
        }

        init(from decoder: any Decoder) throws {
            let path = decoder.configurationPath
            let container = try decoder.container(keyedBy: ConfigKey.self)
            try container.refuseUnknown(
                [
                    "adminKeys", "auditorKeys", "clientApiKeys", "checkpoint", "apns", "registrationExpiry",
                    "contentRetention", "identifierRetention", "witnesses",
                    "witnessQuorum",
                ],
                "unknown key; expected adminKeys, auditorKeys, clientApiKeys, checkpoint, apns, registrationExpiry, "
                    + "contentRetention, identifierRetention, witnesses or witnessQuorum",
                path: path)
            if container.contains(ConfigKey("witnesses")) {
                do {
                    witnesses = try container.decode([WitnessSection].self, forKey: ConfigKey("witnesses"))
                } catch let error as LedgerCoreError {
                    throw error
                } catch {
                    throw LedgerCoreError(
                        .invalidArgument, field: "\(decoder.configurationField).witnesses",
                        "expected a list of {\"url\": …, \"verifierKey\": …}")
                }
            } else {
                witnesses = nil
            }
            if container.contains(ConfigKey("witnessQuorum")) {
                guard let quorum = try? container.decode(Int.self, forKey: ConfigKey("witnessQuorum")) else {
                    throw LedgerCoreError(
                        .invalidArgument, field: "\(decoder.configurationField).witnessQuorum",
                        "expected a whole number")
                }
                witnessQuorum = quorum
            } else {
                witnessQuorum = nil
            }
            let expiryField = "\(decoder.configurationField).registrationExpiry"
            if container.contains(ConfigKey("registrationExpiry")) {
                guard let text = try? container.decode(String.self, forKey: ConfigKey("registrationExpiry")) else {
                    throw LedgerCoreError(
                        .invalidArgument, field: expiryField, "expected a string such as \"270d\" or \"never\"")
                }
                registrationExpiry = try RegistrationExpiry(parsing: text, field: expiryField)
            } else {
                registrationExpiry = nil
            }
            contentRetention = try Self.retention("contentRetention", in: container, decoder: decoder)
            identifierRetention = try Self.retention("identifierRetention", in: container, decoder: decoder)
            adminKeys = try container.strings("adminKeys", path: path)
            auditorKeys = try container.strings("auditorKeys", path: path)
            clientApiKeys = try container.strings("clientApiKeys", path: path)
            checkpoint =
                container.contains(ConfigKey("checkpoint"))
                ? try container.section(CheckpointSection.self, "checkpoint", path: path) : nil
            apns =
                container.contains(ConfigKey("apns"))
                ? try container.section(APNsSection.self, "apns", path: path) : nil
        }
    }

    /// `projects.<name>.checkpoint`: `origin`, `keyName` and `keyFile`, all optional strings.
    struct CheckpointSection: Decodable {
        let values: [String: String]
        var origin: String? { values["origin"] }
        var keyName: String? { values["keyName"] }
        var keyFile: String? { values["keyFile"] }

        init(from decoder: any Decoder) throws {
            values = try decoder.configurationStrings(
                ["origin", "keyName", "keyFile"], unknown: "unknown key; expected origin, keyName or keyFile",
                malformed: "expected a string", allowsEmpty: true)
        }
    }

    /// `projects.<name>.apns`: what ``APNsSettings`` is made of, as written.
    struct APNsSection: Decodable {
        let values: [String: String]
        /// `broadcast`: false when absent.
        let broadcast: Bool

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: ConfigKey.self)
            if container.contains(ConfigKey("broadcast")) {
                // Strictly a JSON boolean: `"true"` or `1` is refused, not read as true.
                guard let value = try? container.decode(Bool.self, forKey: ConfigKey("broadcast")) else {
                    throw LedgerCoreError(
                        .invalidArgument, field: "\(decoder.configurationField).broadcast", "expected true or false")
                }
                broadcast = value
            } else {
                broadcast = false
            }
            values = try decoder.configurationStrings(
                APNsSettings.keys, known: APNsSettings.allKeys,
                unknown: "unknown key; expected one of \(APNsSettings.allKeys.joined(separator: ", "))",
                malformed: "expected a non-empty string", allowsEmpty: false)
        }
    }

    /// `tls`: `certificateFile` and `keyFile`, both required file paths.
    struct TLSSection: Decodable {
        let certificateFile: String
        let keyFile: String

        init(from decoder: any Decoder) throws {
            let field = decoder.configurationField
            let container = try decoder.container(keyedBy: ConfigKey.self)
            try container.refuseUnknown(
                ["certificateFile", "keyFile"], "unknown key; expected certificateFile or keyFile",
                path: decoder.configurationPath)
            func path(_ key: String) throws -> String {
                guard let text = try? container.decode(String.self, forKey: ConfigKey(key)), !text.isEmpty else {
                    throw LedgerCoreError(.invalidArgument, field: "\(field).\(key)", "expected a file path")
                }
                return text
            }
            certificateFile = try path("certificateFile")
            keyFile = try path("keyFile")
        }
    }
}

extension ConfigurationFile {
    /// `cluster`: this node's part in a cluster (docs/cluster.md). `nodeId`, `advertiseURL` and
    /// `etcdEndpoints` may instead come from `ledger serve --node-id`, `--advertise-url` and `--etcd`.
    struct ClusterSection: Decodable {
        let nodeID: String?
        let advertiseURL: String?
        let etcdEndpoints: [String]?
        let leaseSeconds: Int?
        let replicas: Int?
        let peerKeys: [String]?
        let peerSecretFile: String?
        let maximumBlockBytes: Int?
        let retainedEvents: Int?
        let commitAhead: Bool?

        static let keys = [
            "nodeId", "advertiseURL", "etcdEndpoints", "leaseSeconds", "replicas", "peerKeys", "peerSecretFile",
            "maximumBlockBytes", "retainedEvents", "commitAhead",
        ]

        init(from decoder: any Decoder) throws {
            let path = decoder.configurationPath
            let field = decoder.configurationField
            let container = try decoder.container(keyedBy: ConfigKey.self)
            try container.refuseUnknown(
                Set(Self.keys), "unknown key; expected one of \(Self.keys.joined(separator: ", "))", path: path)
            nodeID = try container.string("nodeId", "expected a string", path: path)
            advertiseURL = try container.string("advertiseURL", "expected a URL", path: path)
            etcdEndpoints = try container.strings("etcdEndpoints", path: path)
            peerKeys = try container.strings("peerKeys", path: path)
            peerSecretFile = try container.string("peerSecretFile", "expected a file path", path: path)
            func number(_ key: String) throws -> Int? {
                guard container.contains(ConfigKey(key)) else { return nil }
                guard let value = try? container.decode(Int.self, forKey: ConfigKey(key)) else {
                    throw LedgerCoreError(.invalidArgument, field: "\(field).\(key)", "expected a whole number")
                }
                return value
            }
            leaseSeconds = try number("leaseSeconds")
            replicas = try number("replicas")
            maximumBlockBytes = try number("maximumBlockBytes")
            retainedEvents = try number("retainedEvents")
            if container.contains(ConfigKey("commitAhead")) {
                guard let value = try? container.decode(Bool.self, forKey: ConfigKey("commitAhead")) else {
                    throw LedgerCoreError(.invalidArgument, field: "\(field).commitAhead", "expected true or false")
                }
                commitAhead = value
            } else {
                commitAhead = nil
            }
        }
    }
}

/// Any member name of a config object.
struct ConfigKey: CodingKey {
    let stringValue: String
    var intValue: Int? { nil }
    init(_ stringValue: String) { self.stringValue = stringValue }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

extension Decoder {
    /// An object of optional string members `keys`: an unknown member is refused with `unknown`, one that is not
    /// a string (or is empty or holds NUL, unless `allowsEmpty`) with `malformed`.
    fileprivate func configurationStrings(
        _ keys: [String], known: [String]? = nil, unknown: String, malformed: String, allowsEmpty: Bool
    ) throws -> [String: String] {
        let path = configurationPath
        let container = try container(keyedBy: ConfigKey.self)
        try container.refuseUnknown(Set(known ?? keys), unknown, path: path)
        var values: [String: String] = [:]
        for key in keys {
            guard let text = try container.string(key, malformed, path: path) else { continue }
            guard allowsEmpty || (!text.isEmpty && !text.contains("\0")) else {
                throw LedgerCoreError(.invalidArgument, field: "\(configurationField).\(key)", malformed)
            }
            values[key] = text
        }
        return values
    }

    /// The config file's path, as `ServerConfiguration.load(path:)` gave it to the decoder.
    fileprivate var configurationPath: String { userInfo[ConfigurationFile.pathKey] as? String ?? "config" }

    /// Where this value is: `config.json: projects.shop.checkpoint`.
    fileprivate var configurationField: String {
        "\(configurationPath): \(codingPath.map { $0.intValue.map(String.init) ?? $0.stringValue }.joined(separator: "."))"
    }
}

extension KeyedDecodingContainer where Key == ConfigKey {
    /// `config.json: a.b` for the member `name` of this object, in the file at `path`.
    private func field(_ name: String, path: String) -> String {
        "\(path): \((codingPath.map(\.stringValue) + [name]).joined(separator: "."))"
    }

    /// Refuses the first member (in byte order) that is not one of `known`, naming it.
    func refuseUnknown(_ known: Set<String>, _ message: String, path: String) throws {
        if let unknown = allKeys.map(\.stringValue).sorted().first(where: { !known.contains($0) }) {
            throw LedgerCoreError(.invalidArgument, field: field(unknown, path: path), message)
        }
    }

    /// The string member `name`, `nil` when absent; refused with `message` when it is not a string.
    func string(_ name: String, _ message: String, path: String) throws -> String? {
        guard contains(ConfigKey(name)) else { return nil }
        guard let text = try? decode(String.self, forKey: ConfigKey(name)) else {
            throw LedgerCoreError(.invalidArgument, field: field(name, path: path), message)
        }
        return text
    }

    /// The list of strings `name`, `nil` when absent.
    func strings(_ name: String, path: String) throws -> [String]? {
        guard contains(ConfigKey(name)) else { return nil }
        guard let list = try? decode([String].self, forKey: ConfigKey(name)) else {
            throw LedgerCoreError(.invalidArgument, field: field(name, path: path), "expected a list of strings")
        }
        return list
    }

    /// The object `name` as `Section`: refused as "expected an object" when it is not an object, and with the
    /// section's own refusal when it is one.
    func section<Section: Decodable>(_ type: Section.Type, _ name: String, path: String) throws -> Section {
        guard (try? nestedContainer(keyedBy: ConfigKey.self, forKey: ConfigKey(name))) != nil else {
            throw LedgerCoreError(.invalidArgument, field: field(name, path: path), "expected an object")
        }
        return try decode(Section.self, forKey: ConfigKey(name))
    }
}

extension ConfigurationFile {
    /// `projects.<name>.witnesses[i]`: `{"url": "https://…", "verifierKey": "<vkey>"}`.
    struct WitnessSection: Decodable {
        let witness: WitnessRequirement.Witness

        init(from decoder: any Decoder) throws {
            let field = decoder.configurationField
            let values = try decoder.configurationStrings(
                ["url", "verifierKey"], unknown: "unknown key; expected url or verifierKey",
                malformed: "expected a non-empty string", allowsEmpty: false)
            guard let url = values["url"], let components = URLComponents(string: url),
                components.scheme == "http" || components.scheme == "https", components.host?.isEmpty == false,
                components.query == nil, components.fragment == nil
            else {
                throw LedgerCoreError(
                    .invalidArgument, field: field + ".url",
                    "the witness's submission prefix, an http(s) URL without query (add-checkpoint is appended)")
            }
            guard let vkey = values["verifierKey"], let key = CosignatureVerifier(vkey: vkey) else {
                throw LedgerCoreError(
                    .invalidArgument, field: field + ".verifierKey",
                    "a cosigner vkey <name>+<key id>+<base64(0x04 ‖ Ed25519 key)> (`ledger witness --public-key`)")
            }
            witness = WitnessRequirement.Witness(url: url.hasSuffix("/") ? String(url.dropLast()) : url, key: key)
        }
    }
}
