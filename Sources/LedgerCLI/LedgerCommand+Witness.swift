import ArgumentParser
import Foundation
import Hummingbird
import LedgerCore
import LedgerQueries
import LedgerServer
import LedgerStore
import Logging

extension LedgerCommand {
    /// `ledger witness`: the product as a C2SP tlog-witness, run by an auditor on their own machine.
    struct Witness: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Run a transparency-log witness (C2SP tlog-witness) that cosigns consistent checkpoints.",
            discussion: """
                Serves POST /add-checkpoint for each --log ORIGIN=VKEY. The latest checkpoint cosigned per log is \
                kept in LMDB in --data, written in the same transaction as its check, before the answer. A checkpoint \
                the log signed at a cosigned size with another root is kept once as evidence of a split view, up to \
                1 MiB (--evidence prints them); a proof that does not verify is refused and not kept. The key file (mode 0600) is made when missing; --public-key prints the vkey to pin. \
                Every connection has `ledger serve`'s timeouts and caps (docs/server.md, "Witness limits"), with \
                defaults for a public service. docs/compliance.md says how an auditor runs one.
                """)

        @Option(help: "The witness's own directory (its LMDB store).")
        var data: String = "./witness-data"

        @Option(help: "The witness's Ed25519 key file (made, mode 0600, when missing).")
        var key: String

        @Option(help: "The witness's name: what its cosignature lines and vkey carry.")
        var name: String = "topicledger-witness"

        @Option(help: "Address to bind.")
        var host: String = "127.0.0.1"

        @Option(help: "Port to listen on (0 picks a free one).")
        var port: Int = 7380

        @Option(
            name: .customLong("log"),
            help: "A log to witness: ORIGIN=VKEY, its verifier key (`ledger checkpoint --public-key`). Repeatable.")
        var logs: [String] = []

        @Option(
            help: """
                Close a connection that has not sent a whole request head this many seconds after it opened or after \
                its last answer (`ledger serve`'s idleTimeoutSeconds; at most 86400).
                """)
        var idleTimeoutSeconds = ConnectionLimits.witness.idleTimeoutSeconds

        @Option(help: "The most a request body may take from its head, in seconds (requestBodyTimeoutSeconds).")
        var requestBodyTimeoutSeconds = ConnectionLimits.witness.requestBodyTimeoutSeconds

        @Option(
            help: """
                After a body's first 10 seconds, each this many bytes received allow one more second \
                (minRequestBodyBytesPerSecond).
                """)
        var minRequestBodyBytesPerSecond = ConnectionLimits.witness.minimumBodyBytesPerSecond

        @Option(
            help: """
                Connections open at once; more are closed as they arrive. Lowered to what the limit on open files \
                leaves room for (maxConnections).
                """)
        var maxConnections = ConnectionLimits.witness.maximumConnections

        @Option(
            help: """
                Connections one client address (IPv4, or an IPv6 /64) may hold open at once; more are closed as they \
                arrive. Behind a reverse proxy, give --max-connections' value (maxConnectionsPerAddress).
                """)
        var maxConnectionsPerAddress = ConnectionLimits.witness.maximumConnectionsPerAddress

        @Flag(help: "Print the witness's vkey (`<name>+<key id>+<base64(0x04 ‖ key)>`) and exit.")
        var publicKey = false

        @Flag(help: "Print the kept evidence of split views (JSON, one a line) and exit.")
        var evidence = false

        func validate() throws {
            guard NoteVerifier.isValidName(name) else { throw ValidationError("--name has no spaces, + or newlines") }
            guard (0...65535).contains(port) else { throw ValidationError("--port is 0 to 65535") }
            if !publicKey && !evidence && logs.isEmpty {
                throw ValidationError("give at least one --log ORIGIN=VKEY to witness")
            }
            for (flag, key, value) in [
                ("--idle-timeout-seconds", "idleTimeoutSeconds", idleTimeoutSeconds),
                ("--request-body-timeout-seconds", "requestBodyTimeoutSeconds", requestBodyTimeoutSeconds),
                ("--min-request-body-bytes-per-second", "minRequestBodyBytesPerSecond", minRequestBodyBytesPerSecond),
                ("--max-connections", "maxConnections", maxConnections),
                ("--max-connections-per-address", "maxConnectionsPerAddress", maxConnectionsPerAddress),
            ] {
                if let problem = ConnectionLimits.problem(key: key, value: value) {
                    throw ValidationError("\(flag): \(problem)")
                }
            }
        }

        /// The connection limits the flags give.
        var connectionLimits: ConnectionLimits {
            ConnectionLimits(
                idleTimeoutSeconds: idleTimeoutSeconds, requestBodyTimeoutSeconds: requestBodyTimeoutSeconds,
                minimumBodyBytesPerSecond: minRequestBodyBytesPerSecond, maximumConnections: maxConnections,
                maximumConnectionsPerAddress: maxConnectionsPerAddress)
        }

        /// The trusted keys per origin, from `--log ORIGIN=VKEY` (an origin may be given more than one key).
        func logKeys() throws -> [String: [NoteVerifier]] {
            var keys: [String: [NoteVerifier]] = [:]
            for log in logs {
                // The origin may hold '='; a vkey's base64 ends in '=' too: split at the first '=' followed by a
                // valid key.
                guard
                    let separator = log.indices.first(where: { index in
                        log[index] == "=" && NoteVerifier(keyLine: String(log[log.index(after: index)...])) != nil
                    })
                else {
                    throw ValidationError(
                        "--log \(log): expected ORIGIN=VKEY, VKEY from `ledger checkpoint --public-key`")
                }
                let origin = String(log[..<separator])
                guard !origin.isEmpty, let key = NoteVerifier(keyLine: String(log[log.index(after: separator)...]))
                else { throw ValidationError("--log \(log): the origin is empty") }
                keys[origin, default: []].append(key)
            }
            return keys
        }

        func run() async throws {
            let cosigner: Cosigner
            do {
                cosigner = try CosignerKeyFile.open(key, name: name)
            } catch let error as StoreError {
                throw InputError(error.message)
            }
            if publicKey {
                printNow(cosigner.verifier.vkey)
                return
            }
            let store: WitnessStore
            do {
                store = try WitnessStore(directory: data)
            } catch let error as StoreError {
                throw InputError(error.message)
            }
            if evidence {
                for item in try store.evidence() {
                    printNow(String(decoding: try AuditJSON.data(item), as: UTF8.self))
                }
                return
            }
            let keys = try logKeys()
            LoggingSystem.bootstrap { label in StreamLogHandler.standardError(label: label) }
            var logger = Logger(label: "ledger-witness")
            logger.logLevel = .info
            var connections = connectionLimits
            // Its one LMDB store holds the descriptors a project's ledger does.
            connections.fitOpenFiles(reserve: FileDescriptorLimit.reserve(projects: 1), logger: logger)
            printNow(
                "TopicLedger witness \(cosigner.verifier.vkey) on http://\(host):\(port), logs: \(keys.keys.sorted().joined(separator: ", "))"
            )
            let app = buildWitnessApplication(
                settings: WitnessSettings(host: host, port: port, logKeys: keys, connections: connections),
                store: store, cosigner: cosigner, logger: logger)
            try await app.runService()
        }
    }
}
