import CSQLite
import Foundation

/// The durable subscribe workload of `LedgerBench.appendWorkload`, on Redis and on SQLite: `writers`
/// concurrent clients, one subscription change per request, the instance's topic set and the topic's member
/// set both kept (what the ledger's projections keep), acknowledged only once durable.
struct PeerSubscribeWorkload {
    let writers: Int
    let requests: Int
    let scratch: String

    /// Writer `writer`'s request `round`: the same sequence `appendWorkload` appends.
    static func step(writer: Int, round: Int) -> (token: String, topic: String, subscribe: Bool) {
        ("bench-writer-\(writer):APA91b", "topic-\(round % 100)", (round / 100) % 2 == 0)
    }

    /// Changes per second on `server`: each change is MULTI, SADD/SREM topic set, SADD/SREM instance set, EXEC.
    func redis(_ server: RedisServer) throws -> Double {
        let perWriter = requests / writers
        let port = server.port
        let start = ContinuousClock.now
        let done = try onThreads(writers) { writer in
            let connection = try RESPConnection(port: port)
            for round in 0..<perWriter {
                let (token, topic, subscribe) = Self.step(writer: writer, round: round)
                let verb = subscribe ? "SADD" : "SREM"
                let replies = try connection.pipeline([
                    ["MULTI"], [verb, "topic:" + topic, token], [verb, "instance:" + token, topic], ["EXEC"],
                ])
                guard case .array(let results?) = replies[3], results.count == 2 else {
                    throw PeerError("redis: EXEC did not run both commands")
                }
            }
            return perWriter
        }
        return Double(done) / (ContinuousClock.now - start).seconds
    }

    /// Changes per second on a fresh SQLite database: one autocommit INSERT OR IGNORE / DELETE per change on
    /// `subscriptions(topic, token)` (primary key) with an index on `(token, topic)`.
    func sqlite() throws -> Double {
        let directory = (scratch as NSString).appendingPathComponent("ledger-bench-sqlite-\(UUID().uuidString)")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/subscriptions.db"
        try SQLiteDatabase(path: path).execute(SQLitePeer.schema)
        let perWriter = requests / writers
        let start = ContinuousClock.now
        let done = try onThreads(writers) { writer in
            let database = try SQLiteDatabase(path: path)
            let insert = try database.prepare("INSERT OR IGNORE INTO subscriptions(topic, token) VALUES (?, ?)")
            let delete = try database.prepare("DELETE FROM subscriptions WHERE topic = ? AND token = ?")
            for round in 0..<perWriter {
                let (token, topic, subscribe) = Self.step(writer: writer, round: round)
                try (subscribe ? insert : delete).run([topic, token])
            }
            return perWriter
        }
        return Double(done) / (ContinuousClock.now - start).seconds
    }
}

/// The benchmark's condition on the peers, written by hand the way a user of each would write it:
/// `'topic-1' in topics && ('topic-2' in topics || 'topic-7' in topics) && !('topic-3' in topics)
///  || 'topic-500' in topics`, left to right.
enum SQLitePeer {
    static let schema = """
        CREATE TABLE IF NOT EXISTS subscriptions(topic TEXT NOT NULL, token TEXT NOT NULL,
            PRIMARY KEY (topic, token)) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS subscriptions_by_token ON subscriptions(token, topic);
        """

    /// SQLite's compound operators have equal precedence and group left to right, like the condition.
    static let audience = """
        SELECT token FROM subscriptions WHERE topic = 'topic-1'
        INTERSECT SELECT token FROM subscriptions WHERE topic IN ('topic-2', 'topic-7')
        EXCEPT SELECT token FROM subscriptions WHERE topic = 'topic-3'
        UNION SELECT token FROM subscriptions WHERE topic = 'topic-500'
        """
}

enum RedisPeer {
    /// Set algebra into a scratch key, not written to the AOF (`REPL_NONE`): a read costs no fsync.
    /// KEYS: topic-1, topic-2, topic-7, topic-3, topic-500, scratch. ARGV[1]: "count" or "members".
    static let audienceScript = """
        redis.set_repl(redis.REPL_NONE)
        redis.call('SUNIONSTORE', KEYS[6], KEYS[2], KEYS[3])
        redis.call('SINTERSTORE', KEYS[6], KEYS[1], KEYS[6])
        redis.call('SDIFFSTORE', KEYS[6], KEYS[6], KEYS[4])
        redis.call('SUNIONSTORE', KEYS[6], KEYS[6], KEYS[5])
        local result
        if ARGV[1] == 'count' then result = redis.call('SCARD', KEYS[6]) else result = redis.call('SMEMBERS', KEYS[6]) end
        redis.call('DEL', KEYS[6])
        return result
        """

    static func audience(_ connection: RESPConnection, members: Bool) throws -> RESPConnection.Reply {
        try connection.call(
            [
                "EVAL", audienceScript, "6", "topic:topic-1", "topic:topic-2", "topic:topic-7", "topic:topic-3",
                "topic:topic-500", "scratch:audience", members ? "members" : "count",
            ])
    }
}

/// The audience workload's instances loaded into each peer, and the condition's audience timed there.
///
/// `load()` can run on its own thread while the ledger is built; `measure()` runs after it has finished.
final class PeerAudience: @unchecked Sendable {
    // @unchecked: `load()` runs on one thread, and `measure()` and `stop()` only after it has returned.
    let tokens: [String]
    let topics: [[Int]]
    let scratch: String
    private var server: RedisServer?
    private var connection: RESPConnection?
    private var database: SQLiteDatabase?
    private let directory: String

    struct Timing {
        var count: Int
        var countSeconds: Double
        var listSeconds: Double
        var residentBytes: Int
    }

    init(tokens: [String], topics: [[Int]], scratch: String) {
        self.tokens = tokens
        self.topics = topics
        self.scratch = scratch
        directory = (scratch as NSString).appendingPathComponent("ledger-bench-sqlite-\(UUID().uuidString)")
    }

    /// Starts redis-server and fills it and a fresh SQLite database with the same subscriptions.
    func load() throws {
        let server = try RedisServer(scratch: scratch)
        self.server = server
        let connection = try RESPConnection(port: server.port)
        self.connection = connection
        var members = [[Int]](repeating: [], count: 1000)
        for (index, numbers) in topics.enumerated() {
            for number in Set(numbers) { members[number].append(index) }
        }
        var commands: [[String]] = []
        for (number, list) in members.enumerated() {
            for chunk in stride(from: 0, to: list.count, by: 1000) {
                commands.append(
                    ["SADD", "topic:topic-\(number)"] + list[chunk..<min(chunk + 1000, list.count)].map { tokens[$0] })
                if commands.count == 100 {
                    _ = try connection.pipeline(commands)
                    commands = []
                }
            }
        }
        if !commands.isEmpty { _ = try connection.pipeline(commands) }

        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let database = try SQLiteDatabase(path: directory + "/subscriptions.db")
        self.database = database
        try database.execute(SQLitePeer.schema)
        try database.execute("BEGIN")
        let insert = try database.prepare("INSERT OR IGNORE INTO subscriptions(topic, token) VALUES (?, ?)")
        for (index, numbers) in topics.enumerated() {
            for number in numbers { try insert.run(["topic-\(number)", tokens[index]]) }
        }
        try database.execute("COMMIT")
    }

    func measure(countRuns: Int) throws -> (redis: Timing, sqlite: Timing) {
        guard let server, let connection, let database else { throw PeerError("peers not loaded") }
        return (
            try redis(server, connection, countRuns: countRuns), try sqlite(database, countRuns: countRuns)
        )
    }

    func stop() {
        server?.stop()
        connection = nil
        database = nil
        try? FileManager.default.removeItem(atPath: directory)
    }

    private func redis(_ server: RedisServer, _ connection: RESPConnection, countRuns: Int) throws -> Timing {
        var count = 0
        let countSeconds = try median(runs: countRuns) {
            guard case .integer(let value) = try RedisPeer.audience(connection, members: false) else {
                throw PeerError("redis: SCARD did not answer an integer")
            }
            count = value
        }
        let listSeconds = try median(runs: 3) {
            guard case .array(let replies?) = try RedisPeer.audience(connection, members: true) else {
                throw PeerError("redis: SMEMBERS did not answer an array")
            }
            // The audit needs byte order (the digest is over sorted tokens); Redis sets are unordered.
            let sorted = replies.compactMap { reply -> [UInt8]? in
                if case .bulk(let bytes) = reply { return bytes }
                return nil
            }.sorted { $0.lexicographicallyPrecedes($1) }
            guard sorted.count == count else { throw PeerError("redis: SMEMBERS and SCARD disagree") }
        }
        return Timing(
            count: count, countSeconds: countSeconds, listSeconds: listSeconds, residentBytes: server.residentSetBytes)
    }

    private func sqlite(_ database: SQLiteDatabase, countRuns: Int) throws -> Timing {
        let countQuery = try database.prepare("SELECT count(*) FROM (\(SQLitePeer.audience))")
        var count = 0
        let countSeconds = try median(runs: countRuns) {
            try countQuery.run { count = Int(sqlite3_column_int64($0, 0)) }
        }
        let listQuery = try database.prepare(SQLitePeer.audience + " ORDER BY 1")
        let listSeconds = try median(runs: 3) {
            var tokens: [String] = []
            try listQuery.run { tokens.append(String(cString: sqlite3_column_text($0, 0))) }
            guard tokens.count == count else { throw PeerError("sqlite: list and count disagree") }
        }
        return Timing(count: count, countSeconds: countSeconds, listSeconds: listSeconds, residentBytes: 0)
    }
}

/// Runs `body` on a new OS thread (it blocks) and awaits its result.
func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
    }
}
