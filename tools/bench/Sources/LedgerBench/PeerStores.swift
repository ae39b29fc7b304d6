import CSQLite
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

// The stores a user would compare TopicLedger with: Redis (sets, AOF with `appendfsync always`) and SQLite
// (WAL, `synchronous=FULL`). Both are driven through thin blocking clients, one OS thread per connection.

struct PeerError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

// MARK: Redis

/// `redis-server` as a child process on a free port, durable like the ledger: AOF, fsync before every reply.
final class RedisServer {
    let port: Int
    private let process = Process()
    private let directory: String

    init(scratch: String) throws {
        guard
            let binary = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"].first(where: {
                FileManager.default.isExecutableFile(atPath: $0)
            })
        else {
            throw PeerError("redis-server is missing: apt-get install -y redis-server (tools/bench/run.sh does)")
        }
        directory = (scratch as NSString).appendingPathComponent("ledger-bench-redis-\(UUID().uuidString)")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        port = 16_000 + Int.random(in: 0..<2000)
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = [
            "--port", String(port), "--bind", "127.0.0.1", "--dir", directory, "--appendonly", "yes",
            "--appendfsync", "always", "--save", "", "--daemonize", "no", "--logfile", "",
            "--loglevel", "warning",
        ]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        for _ in 0..<100 {
            if let connection = try? RESPConnection(port: port), (try? connection.call(["PING"])) != nil { return }
            Thread.sleep(forTimeInterval: 0.05)
        }
        stop()
        throw PeerError("redis-server did not answer PING on port \(port)")
    }

    /// Stops the server with SHUTDOWN NOSAVE (redis-server started by Foundation's Process does not act on
    /// SIGTERM: it inherits a mask that blocks it), then SIGKILL if it is still there.
    func stop() {
        if process.isRunning {
            _ = try? RESPConnection(port: port).call(["SHUTDOWN", "NOSAVE"])
            for _ in 0..<50 where process.isRunning { Thread.sleep(forTimeInterval: 0.02) }
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    var processIdentifier: Int32 { process.processIdentifier }

    /// The server's resident set size now (VmRSS), in bytes.
    var residentSetBytes: Int { residentBytes(of: process.processIdentifier) }
}

/// A minimal blocking RESP2 client over a loopback TCP socket: enough to drive redis-server for the peer
/// comparison. Hand-written because no Redis client is among the packages this machine can resolve.
final class RESPConnection {
    indirect enum Reply {
        case simple(String), error(String), integer(Int), bulk([UInt8]?), array([Reply]?)
    }

    private let socket: Int32
    private var input: [UInt8] = []
    private var position = 0

    init(port: Int) throws {
        socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw PeerError("socket: errno \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            close(socket)
            throw PeerError("connect to redis on port \(port): errno \(errno)")
        }
        var one: Int32 = 1
        setsockopt(socket, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    deinit { close(socket) }

    /// Sends one command and reads its reply; a Redis error reply throws.
    @discardableResult
    func call(_ command: [String]) throws -> Reply {
        try pipeline([command])[0]
    }

    /// Sends `commands` in one write and reads their replies in order; a Redis error reply throws.
    func pipeline(_ commands: [[String]]) throws -> [Reply] {
        var output: [UInt8] = []
        for command in commands { Self.encode(command, into: &output) }
        try write(output)
        return try commands.map { _ in
            let reply = try readReply()
            if case .error(let message) = reply { throw PeerError("redis: \(message)") }
            return reply
        }
    }

    static func encode(_ command: [String], into output: inout [UInt8]) {
        output += Array("*\(command.count)\r\n".utf8)
        for argument in command {
            output += Array("$\(argument.utf8.count)\r\n".utf8)
            output += Array(argument.utf8)
            output += [13, 10]
        }
    }

    private func write(_ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            let result = bytes.withUnsafeBytes { Glibc.send(socket, $0.baseAddress! + sent, bytes.count - sent, 0) }
            guard result > 0 else { throw PeerError("send to redis: errno \(errno)") }
            sent += result
        }
    }

    private func fill() throws {
        if position > 0 {
            input.removeFirst(position)
            position = 0
        }
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        let received = chunk.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
        guard received > 0 else { throw PeerError("redis closed the connection") }
        input += chunk[0..<received]
    }

    private func readLine() throws -> String {
        while true {
            if let end = input[position...].firstIndex(of: 10), end > position, input[end - 1] == 13 {
                let line = String(decoding: input[position..<(end - 1)], as: UTF8.self)
                position = end + 1
                return line
            }
            try fill()
        }
    }

    private func readReply() throws -> Reply {
        let line = try readLine()
        let rest = String(line.dropFirst())
        switch line.first {
        case "+": return .simple(rest)
        case "-": return .error(rest)
        case ":": return .integer(Int(rest) ?? 0)
        case "$":
            let length = Int(rest) ?? -1
            guard length >= 0 else { return .bulk(nil) }
            while input.count - position < length + 2 { try fill() }
            let bytes = Array(input[position..<(position + length)])
            position += length + 2
            return .bulk(bytes)
        case "*":
            let count = Int(rest) ?? -1
            guard count >= 0 else { return .array(nil) }
            var elements: [Reply] = []
            elements.reserveCapacity(count)
            for _ in 0..<count { elements.append(try readReply()) }
            return .array(elements)
        default: throw PeerError("unexpected RESP line \(line.prefix(20))")
        }
    }
}

// MARK: SQLite

/// One SQLite connection in WAL mode with `synchronous=FULL` (a commit is durable when it returns).
final class SQLiteDatabase {
    private var handle: OpaquePointer?

    init(path: String) throws {
        guard
            sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nil)
                == SQLITE_OK
        else { throw PeerError("sqlite open \(path) failed") }
        sqlite3_busy_timeout(handle, 60_000)
        try execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;")
    }

    deinit { sqlite3_close_v2(handle) }

    func execute(_ sql: String) throws {
        var message: UnsafeMutablePointer<CChar>?
        guard sqlite3_exec(handle, sql, nil, nil, &message) == SQLITE_OK else {
            defer { sqlite3_free(message) }
            throw PeerError("sqlite: \(message.map { String(cString: $0) } ?? "error") in \(sql.prefix(60))")
        }
    }

    func prepare(_ sql: String) throws -> Statement {
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(handle, sql, -1, &statement, nil) == SQLITE_OK, let statement else {
            throw PeerError("sqlite prepare: \(String(cString: sqlite3_errmsg(handle))) in \(sql.prefix(60))")
        }
        return Statement(statement, database: handle)
    }

    final class Statement {
        private let statement: OpaquePointer
        private let database: OpaquePointer?
        private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

        init(_ statement: OpaquePointer, database: OpaquePointer?) {
            self.statement = statement
            self.database = database
        }

        deinit { sqlite3_finalize(statement) }

        /// Binds `texts` to the parameters, runs the statement to the end and calls `row` for each row.
        func run(_ texts: [String] = [], row: (OpaquePointer) -> Void = { _ in }) throws {
            sqlite3_reset(statement)
            for (index, text) in texts.enumerated() {
                sqlite3_bind_text(statement, Int32(index + 1), text, -1, Self.transient)
            }
            while true {
                let result = sqlite3_step(statement)
                if result == SQLITE_DONE { return }
                guard result == SQLITE_ROW else {
                    throw PeerError("sqlite step: \(String(cString: sqlite3_errmsg(database)))")
                }
                row(statement)
            }
        }
    }
}

// MARK: Threads

/// Runs `body(index)` on `count` OS threads (the clients above block) and returns the sum of their results.
func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) throws -> Int) throws -> Int {
    let results = ThreadResults()
    let group = DispatchGroup()
    for index in 0..<count {
        group.enter()
        let thread = Thread {
            results.record(Result { try body(index) })
            group.leave()
        }
        thread.start()
    }
    group.wait()
    return try results.total()
}

/// What the threads of `onThreads` returned.
final class ThreadResults: @unchecked Sendable {
    // @unchecked: `results` is only touched with `lock` held.
    private let lock = NSLock()
    private var results: [Result<Int, any Error>] = []

    func record(_ result: Result<Int, any Error>) {
        lock.lock()
        defer { lock.unlock() }
        results.append(result)
    }

    func total() throws -> Int {
        lock.lock()
        defer { lock.unlock() }
        return try results.reduce(0) { try $0 + $1.get() }
    }
}
