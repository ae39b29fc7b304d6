// swift-tools-version: 6.1
import PackageDescription

// Dependencies point one way: LedgerCLI → LedgerServer → LedgerCluster and LedgerQueries → LedgerStore →
// LedgerCore and LMDBKit → CLMDB; LedgerCluster → EtcdAPI (etcd's gRPC API, generated); FCMWire → LedgerCore, used
// by LedgerQueries and LedgerServer; APNsWire (no ledger types), used by LedgerServer (docs/architecture.md).
// Every module a target imports is one it declares here: tools/check-imports.py fails `make test` otherwise
// (SwiftPM's own check accepts anything reachable).

/// What the storage and the queries over it both use.
let storageDependencies: [Target.Dependency] = [
    "LedgerCore", "LMDBKit",
    .product(name: "Logging", package: "swift-log"),
    .product(name: "Crypto", package: "swift-crypto"),
]

let package = Package(
    name: "TopicLedger",
    // macOS 15: the server's targets use the standard library's `Synchronization.Mutex`. iOS is for
    // TopicLedgerMessaging alone (Foundation and URLSession, no Synchronization), which apps on iOS 15 link.
    platforms: [.macOS(.v15), .iOS(.v15)],
    products: [
        .executable(name: "ledger", targets: ["LedgerCLI"]),
        .executable(name: "ledger-device", targets: ["ledger-device"]),
        .library(name: "TopicLedgerMessaging", targets: ["TopicLedgerMessaging"]),
        .library(name: "LedgerServer", targets: ["LedgerServer"]),
        .library(name: "LedgerCluster", targets: ["LedgerCluster"]),
        .library(name: "LedgerQueries", targets: ["LedgerQueries"]),
        .library(name: "LedgerStore", targets: ["LedgerStore"]),
        .library(name: "FCMWire", targets: ["FCMWire"]),
        .library(name: "APNsWire", targets: ["APNsWire"]),
        .library(name: "LedgerCore", targets: ["LedgerCore"]),
        .library(name: "LMDBKit", targets: ["LMDBKit"]),
    ],
    // Each dependency from a version up to its next major (`from:`); none is held to one version (`exact:`): the
    // generated protobuf and gRPC code needs only the 1.x / 2.x runtimes. Package.resolved is not committed (its
    // pins would name this machine's package mirror; see .gitignore).
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "3.12.3"),
        .package(url: "https://github.com/apple/swift-protobuf.git", from: "1.39.0"),
        .package(url: "https://github.com/x-sheep/swift-property-based.git", from: "2.0.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.0"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache.git", from: "2.1.1"),
        .package(url: "https://github.com/grpc/grpc-swift-2.git", from: "2.4.3"),
        .package(url: "https://github.com/grpc/grpc-swift-nio-transport.git", from: "2.9.2"),
        .package(url: "https://github.com/grpc/grpc-swift-protobuf.git", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-async-algorithms.git", from: "1.1.4"),
    ],
    targets: [
        .systemLibrary(
            name: "CLMDB",
            pkgConfig: "lmdb",
            providers: [.apt(["liblmdb-dev"])]
        ),
        // The app side: Foundation and URLSession only, so an iOS app can depend on it (docs/ios.md).
        .target(name: "TopicLedgerMessaging"),
        .target(
            name: "LMDBKit",
            dependencies: ["CLMDB"]
        ),
        .target(
            name: "LedgerCore",
            dependencies: [
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
            ],
            exclude: ["Codec/ledger_event.proto"]
        ),
        // The FCM wire: message validation (v1 and the platform blocks), the device payload mapping, the strict
        // JSON readers, percent decoding and the batch bodies. The fuzzers link it.
        .target(
            name: "FCMWire",
            dependencies: ["LedgerCore", .product(name: "HTTPTypes", package: "swift-http-types")]
        ),
        // The APNs wire: the HTTP/2 client over a few connections, the provider token (ES256 JWT), and every
        // documented answer mapped to an outcome. No ledger types: LedgerServer's pusher drives it.
        .target(
            name: "APNsWire",
            dependencies: [
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
            ]
        ),
        // Storage: the LMDB environment, the log, the single writer and the projections.
        .target(
            name: "LedgerStore",
            dependencies: storageDependencies
        ),
        // Queries over the stored ledger: replay, audit, proofs and their signing keys, the device inbox,
        // verify, and import.
        .target(
            name: "LedgerQueries",
            dependencies: ["LedgerStore", "FCMWire"] + storageDependencies
        ),
        // etcd's v3 API, generated by tools/generate-etcd-grpc.sh from the .proto files etcd 3.4 ships.
        .target(
            name: "EtcdAPI",
            dependencies: [
                .product(name: "GRPCCore", package: "grpc-swift-2"),
                .product(name: "GRPCProtobuf", package: "grpc-swift-protobuf"),
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
            ]
        ),
        // A cluster of nodes sharing etcd: membership, one leader per project fenced in etcd, the replicated
        // tail of each project's log, placement (docs/cluster.md).
        .target(
            name: "LedgerCluster",
            dependencies: [
                "EtcdAPI",
                "LedgerStore",
                "LedgerCore",
                .product(name: "GRPCCore", package: "grpc-swift-2"),
                .product(name: "GRPCNIOTransportHTTP2", package: "grpc-swift-nio-transport"),
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                // A watch's responses handed to its loop with back-pressure (`AsyncThrowingChannel`).
                .product(name: "AsyncAlgorithms", package: "swift-async-algorithms"),
            ],
            exclude: ["Wire/replication_block.proto"]
        ),
        .target(
            name: "LedgerServer",
            dependencies: [
                "LedgerCluster",
                "LedgerStore",
                "LedgerQueries",
                "LedgerCore",
                "FCMWire",
                "APNsWire",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdHTTP2", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "Mustache", package: "swift-mustache"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "_NIOFileSystem", package: "swift-nio"),
            ]
        ),
        .executableTarget(
            name: "LedgerCLI",
            dependencies: [
                "LedgerServer",
                "LedgerCluster",
                "LedgerStore",
                "LedgerQueries",
                "LedgerCore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                // `ledger serve` runs the Application LedgerServer builds (ApplicationProtocol.runService).
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // A sample device on TopicLedgerMessaging (samples/DeviceClient): register, subscribe, poll or stream, acknowledge.
        .executableTarget(
            name: "ledger-device",
            dependencies: [
                "TopicLedgerMessaging",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "samples/DeviceClient"
        ),
        .target(
            name: "LedgerTestSupport",
            dependencies: [
                "LedgerStore", "LedgerCore", "LMDBKit", .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Tests/LedgerTestSupport"
        ),
        // What the fuzz targets check of each input (tools/fuzz), as throwing functions: the libFuzzer programs
        // call them, and FCMWireTests runs them on the seed corpora and mutations of them in the one test build.
        .target(name: "FuzzHarness", dependencies: ["LedgerCore", "FCMWire"], path: "tools/fuzz/FuzzHarness"),
        // A helper the crash-safety tests run as a child process and kill with SIGKILL.
        .executableTarget(
            name: "LedgerCrashWorker",
            dependencies: ["LedgerStore", "LedgerCore", "LedgerTestSupport"],
            path: "Tests/LedgerCrashWorker"
        ),
        .testTarget(
            name: "LMDBKitTests",
            dependencies: [
                "LMDBKit",
                "LedgerTestSupport",
                .product(name: "PropertyBased", package: "swift-property-based"),
            ]
        ),
        .testTarget(
            name: "LedgerCoreTests",
            dependencies: [
                "LedgerCore",
                "LedgerTestSupport",
                .product(name: "PropertyBased", package: "swift-property-based"),
                // EventCodecTests build stored events by hand; MerkleTreeTests hash with an independent SHA-256.
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .testTarget(
            name: "FCMWireTests",
            dependencies: [
                "FCMWire",
                "FuzzHarness",
                "LedgerCore",
                "LedgerTestSupport",
                .product(name: "PropertyBased", package: "swift-property-based"),
            ]
        ),
        .testTarget(
            name: "APNsWireTests",
            dependencies: ["APNsWire", "LedgerTestSupport", .product(name: "Crypto", package: "swift-crypto")]
        ),
        .testTarget(
            name: "LedgerStoreTests",
            dependencies: [
                "LedgerStore",
                "LedgerQueries",
                "LedgerCore",
                // Where a send's pushes go (APNsDestination: BroadcastReplayTests).
                "FCMWire",
                "LMDBKit",
                "LedgerTestSupport",
                // Run as a child process and killed (CrashSafetyTests).
                "LedgerCrashWorker",
                .product(name: "PropertyBased", package: "swift-property-based"),
                // The witness store's tests sign checkpoints (WitnessStoreTests).
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .testTarget(
            name: "LedgerServerTests",
            dependencies: [
                "LedgerServer",
                // The broadcast channel routes' tests answer as Apple (APNsChannelClient.Answer).
                "APNsWire",
                "LedgerCluster",
                "LedgerStore",
                "LedgerQueries",
                "LedgerCore",
                "FCMWire",
                "LMDBKit",
                "LedgerTestSupport",
                // ConsoleTests compare the console with `ledger replay`.
                "LedgerCLI",
                // ConsoleViewTests render the console's templates.
                .product(name: "Mustache", package: "swift-mustache"),
                .product(name: "PropertyBased", package: "swift-property-based"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "LedgerClusterTests",
            dependencies: [
                "LedgerCluster", "LedgerStore", "LedgerCore",
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
            ]
        ),
        .testTarget(
            name: "TopicLedgerMessagingTests",
            dependencies: [
                "TopicLedgerMessaging",
                "LedgerServer",
                "LedgerStore",
                "LedgerTestSupport",
                // DeviceCommandTests run the sample device.
                "ledger-device",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "LedgerCLITests",
            // The tests run the `ledger` binary, and read ledgers' raw bytes through LMDBKit.
            dependencies: ["LedgerCLI", "LedgerStore", "LedgerQueries", "LedgerCore", "LMDBKit", "LedgerTestSupport"]
        ),
    ]
)

// The benchmark harness (tools/bench) is built only by tools/bench/run.sh, in release mode with its own
// scratch path, so the normal build and test run never compile it.
if Context.environment["TOPICLEDGER_BENCH"] == "1" {
    package.targets.append(
        .systemLibrary(
            name: "CSQLite", path: "tools/bench/Sources/CSQLite", pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]))
    package.targets.append(
        .executableTarget(
            name: "LedgerBench",
            dependencies: [
                "LedgerStore", "LedgerQueries", "LedgerServer", "LedgerCore", "FCMWire", "LMDBKit", "CSQLite",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "tools/bench/Sources/LedgerBench"
        ))
}

// The libFuzzer programs (tools/fuzz) are built only by tools/fuzz/run.sh (`make fuzz`), with libFuzzer and
// AddressSanitizer in their own scratch path; `make test` runs their checks through FuzzHarnessTests instead.
if Context.environment["TOPICLEDGER_FUZZ"] == "1" {
    package.targets.append(.target(name: "FuzzDriver", path: "tools/fuzz/FuzzDriver"))
    for name in ["ConditionFuzzer", "MessageFuzzer", "EventFuzzer"] {
        package.targets.append(
            .executableTarget(
                name: name, dependencies: ["FuzzHarness", "FuzzDriver"], path: "tools/fuzz/\(name)"))
    }
}

// The language settings of every Swift target, as in Hummingbird's own Package.swift: `any` spelled out for
// existentials, and members visible only from modules a file imports. (Hummingbird's third,
// InternalImportsByDefault, is not adopted: the library targets re-export their dependencies' types in
// public API, so every such import would have to become `public import` first.)
let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]
for target in package.targets where target.type != .system {
    target.swiftSettings = (target.swiftSettings ?? []) + swiftSettings
}
