import Crypto
import Foundation
import LedgerCore
import LedgerStore
import Logging

/// A fresh directory for one test, removed by `remove()` — and, with every other one this test process
/// made, when the process exits.
///
/// They all live under one directory per process (`topicledger-tests-<pid>` in the system's temporary
/// directory) that an `atexit` handler deletes: a test that returns early, throws, or keeps its ledger open
/// to the end cannot leave ledgers behind (a full run used to leave about 900 directories, 90 MB, in /tmp).
/// A process that is killed leaves its directory; the next run does not touch it.
public struct TemporaryDirectory: Sendable {
    public let path: String

    public init(_ label: String = "ledger-test") {
        path = Self.processRoot + "/\(label)-\(UUID().uuidString)"
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    public func remove() { try? FileManager.default.removeItem(atPath: path) }

    /// Created, and its removal at exit registered, on first use.
    private static let processRoot: String = {
        let root = NSTemporaryDirectory() + "topicledger-tests-\(getpid())"
        try! FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        atexit { try? FileManager.default.removeItem(atPath: TemporaryDirectory.processRoot) }
        return root
    }()
}

/// A deterministic random number generator (SplitMix64), so a failing seed can be replayed.
public struct SeededGenerator: RandomNumberGenerator, Sendable {
    private var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// A logger that drops everything (tests check results, not log lines).
public let quietLogger: Logger = {
    var logger = Logger(label: "test")
    logger.logLevel = .critical
    return logger
}()

/// Opens (creating) a ledger for tests.
public func openTestLedger(
    _ directory: TemporaryDirectory, project: ProjectID = .default, mode: Ledger.Options.Mode = .readWrite,
    configure: (inout Ledger.Options) -> Void = { _ in }
) throws -> Ledger {
    var options = Ledger.Options(mode: mode)
    // Small, so that tests see memberships on both of the instance side's databases and the moves between
    // them (RecentMemberships); the default is 262,144.
    options.limits.recentMembershipsBeforeMove = 7
    configure(&options)
    return try Ledger.open(dataDirectory: directory.path, project: project, options: options, logger: quietLogger)
}

/// Runs `body` with a new ledger in a temporary directory (``openTestLedger(_:project:mode:configure:)``), then
/// closes the ledger and removes the directory.
public func withTestLedger<Value>(
    configure: (inout Ledger.Options) -> Void = { _ in }, _ body: (Ledger) async throws -> Value
) async throws -> Value {
    let directory = TemporaryDirectory()
    defer { directory.remove() }
    let ledger = try openTestLedger(directory, configure: configure)
    defer { ledger.close() }
    return try await body(ledger)
}

/// Random requests over a small pool of tokens and topics, so that every kind of event and every
/// interesting state (re-subscribe, unsubscribe of absent topics, unregister, re-register) occurs.
public struct RandomHistory {
    public let tokens: [RegistrationToken]
    public let topics: [TopicName]

    public init(tokenCount: Int = 10, topicCount: Int = 5) {
        tokens = (0..<tokenCount).map { try! RegistrationToken("tok-\($0):APA91b\($0 * 7919)") }
        topics = (0..<topicCount).map { try! TopicName("topic-\($0)") }
    }

    /// `count` requests of 1…4 operations each.
    public func requests(count: Int, using generator: inout SeededGenerator) -> [WriteRequest] {
        (0..<count).map { index in
            let operations = (0..<Int.random(in: 1...4, using: &generator)).map { _ in
                operation(using: &generator)
            }
            return WriteRequest(actor: "test", requestID: "req-\(index)", operations: operations)
        }
    }

    public func operation(using generator: inout SeededGenerator) -> LedgerOperation {
        let token = tokens.randomElement(using: &generator)!
        let topic = topics.randomElement(using: &generator)!
        let via = SubscriptionChannel.allCases.randomElement(using: &generator)!
        switch Int.random(in: 0..<100, using: &generator) {
        case 0..<15: return .register(token, platform: Bool.random(using: &generator) ? "ios" : nil, appID: nil)
        case 15..<20: return .unregister(token, reason: "test")
        case 20..<65: return .subscribe(token, topic, via: via)
        case 65..<84: return .unsubscribe(token, topic, via: via)
        case 84..<88: return .acknowledge(token, through: UInt64.random(in: 0...60, using: &generator))
        case 88..<91:
            // One of three APNs tokens, so that setting the one held (a no-op) happens too.
            let variant = UInt8.random(in: 1...3, using: &generator)
            let apnsToken = try! APNsDeviceToken(
                bytes: [UInt8](repeating: variant, count: 32), sandbox: variant == 3)
            return .setAPNsToken(token, apnsToken)
        case 91..<92: return .clearAPNsToken(token, reason: "test")
        case 92..<94:
            let failed = tokens.randomElement(using: &generator)!
            return .recordPushProgress(
                PushProgress(
                    sendSeq: UInt64.random(in: 1...60, using: &generator),
                    throughToken: Bool.random(using: &generator) ? token : nil,
                    finished: Bool.random(using: &generator), expired: Bool.random(using: &generator),
                    failures: Bool.random(using: &generator)
                        ? [PushFailure(token: failed, kind: .rejected, status: 400, reason: "BadTopic")] : [],
                    settledThrough: UInt64.random(in: 0...60, using: &generator)))
        default:
            let target: MessageTarget =
                Bool.random(using: &generator) ? .topic(topic) : .condition("'\(topic.rawValue)' in topics")
            return .send(target, precedence: .leftToRight, messageJSON: Array(#"{"data":{"k":"v"}}"#.utf8))
        }
    }
}

/// The directory holding the package's built executables (`ledger`, `LedgerCrashWorker`).
public func builtProductsDirectory() -> URL {
    if let override = ProcessInfo.processInfo.environment["LEDGER_BUILD_DIR"] {
        return URL(fileURLWithPath: override)
    }
    // Tests run from a binary in the build products directory (…/debug/TopicLedgerPackageTests.xctest).
    var candidate = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    for _ in 0..<4 {
        candidate.deleteLastPathComponent()
        if FileManager.default.fileExists(atPath: candidate.appendingPathComponent("ledger").path) {
            return candidate
        }
    }
    // Fall back to the package's default build directory.
    let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    return packageRoot.appendingPathComponent(".build/debug")
}

/// The result of running a child process to completion.
public struct ProcessResult: Sendable {
    public var status: Int32
    public var stdout: String
    public var stderr: String
}

/// Runs one of the package's executables with `arguments`, feeding `input` on standard input.
public func runProduct(_ name: String, _ arguments: [String], input: String? = nil) async throws -> ProcessResult {
    try await runProcess(builtProductsDirectory().appendingPathComponent(name).path, arguments, input: input)
}

/// Runs blocking work — waiting for a child process, reading its pipes, polling a file while it runs — on a
/// thread of its own, and resumes the caller when it is done.
///
/// Tests run on Swift's cooperative pool, which has one thread per core: two on the CI machine. A test that
/// blocks one of them for as long as a child process runs takes it from every other test for that long, and
/// the in-process servers of the delivery and messaging tests answer nothing while both are taken. A full run
/// caught both threads reading child pipes (the kill -9 test's worker and a CLI test's `ledger`) for 53 s,
/// and a messaging test that waited 10 s for its registration failed; the same work on threads of its own
/// shares the cores with them instead.
public func onThreadOfItsOwn<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread { continuation.resume(with: Result { try work() }) }
        thread.start()
    }
}

/// Waits for a child process without `Process.waitUntilExit()`, which polls a run loop for the child's end and,
/// called off the main thread under load, can miss it and wait forever (a known swift-corelibs-foundation
/// problem, reported by other projects; the one hang of a full test run seen here was another Foundation
/// deadlock, in URLSession — see `ServerAPI.data(for:in:)`). The termination handler is installed before the
/// process starts, so even a child that ends at once is seen.
public final class ChildExit: Sendable {
    private let exited = DispatchSemaphore(value: 0)

    /// Installs the termination handler, then runs `process`.
    public init(running process: Process) throws {
        let exited = exited
        process.terminationHandler = { _ in exited.signal() }
        try process.run()
    }

    /// Returns once the process has ended (its `terminationStatus` and `terminationReason` are then set).
    public func wait() { exited.wait() }
}

/// Runs the executable at `path` with `arguments`, feeding `input` on standard input (waiting for it on a
/// thread of its own: ``onThreadOfItsOwn(_:)``).
public func runProcess(_ path: String, _ arguments: [String], input: String? = nil) async throws -> ProcessResult {
    try await onThreadOfItsOwn { try runProcessBlocking(path, arguments, input: input) }
}

private func runProcessBlocking(_ path: String, _ arguments: [String], input: String?) throws -> ProcessResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    let stdout = Pipe()
    let stderr = Pipe()
    let stdin = Pipe()
    process.standardOutput = stdout
    process.standardError = stderr
    process.standardInput = stdin
    let exit = try ChildExit(running: process)
    if let input {
        // A child that stops reading early (an import refusing a line) closes the pipe: its exit status and
        // standard error say so, and the write's EPIPE is not an error of the test (nor SIGPIPE its end).
        signal(SIGPIPE, SIG_IGN)
        try? stdin.fileHandleForWriting.write(contentsOf: Data(input.utf8))
    }
    try stdin.fileHandleForWriting.close()
    // Read both pipes before waiting so a large output cannot block the child.
    let group = DispatchGroup()
    nonisolated(unsafe) var errData = Data()
    group.enter()
    DispatchQueue.global().async {
        errData = stderr.fileHandleForReading.readDataToEndOfFile()
        group.leave()
    }
    let outData = stdout.fileHandleForReading.readDataToEndOfFile()
    group.wait()
    exit.wait()
    return ProcessResult(
        status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
        stderr: String(decoding: errData, as: UTF8.self))
}

/// Lowercase-hex SHA-256 of `text`'s UTF-8 (what `printf … | sha256sum` prints): tests check recipient
/// digests with it rather than with the code under test.
public func sha256Hex(_ text: String) -> String {
    SHA256.hash(data: Array(text.utf8)).map { String(format: "%02x", $0) }.joined()
}

/// The version-2 recipient digest of `devices` as docs/event-format.md defines it (`sort -n | sha256sum` over
/// the device numbers in decimal), computed with ``sha256Hex(_:)`` rather than the code under test.
public func deviceDigestHex(_ devices: [Int]) -> String {
    sha256Hex(devices.sorted().map { "\($0)\n" }.joined())
}

/// A tmpfs mounted for one test (root only).
public struct TmpfsMount: Sendable {
    public let path: String

    public init?(megabytes: Int) {
        let path = NSTemporaryDirectory() + "ledger-tmpfs-\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/mount")
        process.arguments = ["-t", "tmpfs", "-o", "size=\(megabytes)m", "tmpfs", path]
        process.standardError = FileHandle.nullDevice
        guard let exit = try? ChildExit(running: process) else { return nil }
        exit.wait()
        guard process.terminationStatus == 0 else {
            try? FileManager.default.removeItem(atPath: path)
            return nil
        }
        self.path = path
    }

    public func unmount() {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/umount")
        process.arguments = [path]
        (try? ChildExit(running: process))?.wait()
        try? FileManager.default.removeItem(atPath: path)
    }
}

/// A new P-256 private key in PKCS#8 PEM (what APNs calls an authentication key, `AuthKey_….p8`).
public func p256PrivateKeyPEM() -> String { P256.Signing.PrivateKey().pemRepresentation }
