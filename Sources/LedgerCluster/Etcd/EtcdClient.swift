import EtcdAPI
import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2
import Logging
import Synchronization

/// etcd's v3 API over gRPC (the code generated in `EtcdAPI`), to a cluster of members.
///
/// It keeps a connection to each member and sends each call to the one that answered last; a call that fails
/// because its member is unreachable or too slow is tried on the next one, each member once. etcd answers a
/// write only after a quorum has it in its Raft log, and a linearizable read only through its leader, so any
/// member that answers is as good as any other.
///
/// Run ``run()`` (its connections) for as long as the client is used.
///
/// - Note: Thread-safe.
public final class EtcdClient: Sendable {
    typealias Transport = HTTP2ClientTransport.Posix

    /// One etcd member: its address and the clients connected to it.
    ///
    /// Several connections, each call on the next: etcd (grpc-go) answers a unary call with RST_STREAM when its
    /// answer is complete before the request's end of stream arrives, and grpc-swift's transport closes a
    /// connection that receives more than 200 resets in 10 seconds (its rapid-reset guard, not configurable;
    /// grpc/grpc-swift#2202), failing every stream on it, watches included. Spread over the pool, a member
    /// takes ``connectionsPerMember`` × 20 unary calls a second before any connection comes near that, and the
    /// long-lived streams (watches, lease keep-alives) have a connection of their own.
    private final class Member: Sendable {
        let endpoint: String
        let pool: [GRPCClient<Transport>]
        let streams: GRPCClient<Transport>
        let next = Atomic<Int>(0)

        init(endpoint: String, pool: [GRPCClient<Transport>], streams: GRPCClient<Transport>) {
            self.endpoint = endpoint
            self.pool = pool
            self.streams = streams
        }

        /// The pooled client the next unary call goes to.
        var grpc: GRPCClient<Transport> {
            pool[next.wrappingAdd(1, ordering: .relaxed).oldValue % pool.count]
        }
    }

    /// Connections per member for unary calls (see ``Member``).
    static let connectionsPerMember = 16

    /// The largest message this client receives from etcd: a range of blocks, or a watch response that
    /// carries the blocks written while a follower caught up.
    ///
    /// grpc-swift-nio-transport 2.x builds a client stream's message decoder with the call's
    /// `maxRequestMessageBytes` (its `GRPCClientStreamHandler(maxPayloadSize:)`); `maxResponseMessageBytes` is read
    /// by nothing. So this limit is set as both, on every call and stream (``callOptions(timeout:)``). etcd
    /// itself refuses a request over `--max-request-bytes` (1.5 MiB by default), whatever a client allows.
    public static let receiveLimitBytes = 64 << 20

    /// How many bytes of blocks one range read asks etcd for, at most (``blocksPerRange(maximumBlockBytes:)``):
    /// a quarter of ``receiveLimitBytes``, so that the answer fits whatever the blocks hold.
    public static let rangeBudgetBytes = receiveLimitBytes / 4

    /// How many blocks one range read may ask for when a block carries up to `maximumBlockBytes` of records:
    /// the read is bounded by bytes (``rangeBudgetBytes``), not by a count of blocks. A stored block is its
    /// records, each behind a protobuf tag and length (at most 4 bytes for a record under 2 MiB; a record is
    /// over 32 bytes, so at most an eighth more), and its key and header (under 4 KiB).
    public static func blocksPerRange(maximumBlockBytes: Int) -> Int64 {
        let largestStoredBlock = maximumBlockBytes + maximumBlockBytes / 8 + 4096
        return Int64(max(1, rangeBudgetBytes / largestStoredBlock))
    }

    private let members: [Member]
    /// The member the next call goes to first.
    private let preferred = Mutex(0)
    /// How long one call may take on one member before the next is tried.
    public let callTimeout: Duration

    /// - Parameter endpoints: `host:port` (or `http://host:port`) of each member.
    /// - Throws: ``EtcdError`` when an endpoint is not `host:port`.
    public init(endpoints: [String], callTimeout: Duration = .seconds(2)) throws {
        guard !endpoints.isEmpty else { throw EtcdError("no etcd endpoints were given") }
        var members: [Member] = []
        for endpoint in endpoints {
            let (host, port) = try Self.address(endpoint)
            var config = HTTP2ClientTransport.Posix.Config.defaults
            // A member that comes back is used again within a second (the default waits up to two minutes).
            config.backoff = .init(initial: .milliseconds(100), max: .seconds(1), multiplier: 1.6, jitter: 0.2)
            // No oftener than etcd allows (`--grpc-keepalive-min-time`, 5 s): it closes a connection that pings
            // more often, with every stream on it.
            config.connection.keepalive = nil
            // An address as it is (a name resolved by DNS): gRPC's DNS resolver resolves again from time to time,
            // and a change of its answer replaces the connection, with every stream on it.
            let isAddress =
                host.split(separator: ".").count == 4 && host.split(separator: ".").allSatisfy { UInt8($0) != nil }
            let target: any ResolvableTarget =
                isAddress
                ? ResolvableTargets.IPv4(addresses: [.init(host: host, port: port)])
                : ResolvableTargets.DNS(host: host, port: port)
            func client() throws -> GRPCClient<Transport> {
                GRPCClient(
                    transport: try HTTP2ClientTransport.Posix(
                        target: target, transportSecurity: .plaintext, config: config))
            }
            members.append(
                Member(
                    endpoint: endpoint, pool: try (0..<Self.connectionsPerMember).map { _ in try client() },
                    streams: try client()))
        }
        self.members = members
        self.callTimeout = callTimeout
    }

    /// Runs the connections to every member until the task is cancelled or ``close()`` is called.
    public func run() async throws {
        try await withThrowingDiscardingTaskGroup { group in
            for member in members {
                for grpc in member.pool + [member.streams] {
                    group.addTask { try await grpc.runConnections() }
                }
            }
        }
    }

    /// Lets calls in flight finish, then ends ``run()``.
    public func close() {
        for member in members {
            for grpc in member.pool + [member.streams] { grpc.beginGracefulShutdown() }
        }
    }

    // MARK: Calls

    /// Runs `call` on the preferred member, then on each other one while the failure is the member's
    /// (unreachable, too slow), never on one member twice.
    func withMember<R: Sendable>(
        timeout: Duration? = nil,
        _ call: @Sendable (GRPCClient<Transport>, CallOptions) async throws -> R
    ) async throws -> R {
        let options = Self.callOptions(timeout: timeout ?? callTimeout)
        let first = preferred.withLock { $0 }
        var lastError: (any Error)?
        for offset in 0..<members.count {
            let index = (first + offset) % members.count
            do {
                let result = try await call(members[index].grpc, options)
                if offset > 0 { preferred.withLock { $0 = index } }
                return result
            } catch let error as RPCError where Self.isMemberFailure(error) {
                lastError = error
                try Task.checkCancellation()
            }
        }
        throw EtcdError.unavailable(lastError)
    }

    /// The options of every call: `timeout` (none for a stream), and ``receiveLimitBytes``.
    static func callOptions(timeout: Duration?) -> CallOptions {
        var options = CallOptions.defaults
        options.timeout = timeout
        options.maxResponseMessageBytes = receiveLimitBytes
        options.maxRequestMessageBytes = receiveLimitBytes
        return options
    }

    /// Runs a long-lived call (a watch) on the preferred member; when it fails there, the next call goes to
    /// the next member.
    func withWatchMember(_ call: @Sendable (GRPCClient<Transport>, CallOptions) async throws -> Void) async throws {
        let index = preferred.withLock { $0 }
        do {
            try await call(members[index].streams, Self.callOptions(timeout: nil))
        } catch let error as RPCError where Self.isMemberFailure(error) {
            preferred.withLock { if $0 == index { $0 = (index + 1) % members.count } }
            throw error
        }
    }

    /// Whether an error says only that this member could not serve the call (another one may).
    static func isMemberFailure(_ error: RPCError) -> Bool {
        switch error.code {
        case .unavailable, .deadlineExceeded, .unknown, .internalError, .aborted, .cancelled: true
        default: false
        }
    }

    /// The keys `key…rangeEnd` (one key when `rangeEnd` is empty), at most `limit` (0: all), at `revision`
    /// (0: the latest), in key order (from the last with `descending`), linearizable.
    public func range(
        _ key: String, rangeEnd: [UInt8] = [], limit: Int64 = 0, revision: Int64 = 0, keysOnly: Bool = false,
        descending: Bool = false
    ) async throws -> Etcdserverpb_RangeResponse {
        var request = Etcdserverpb_RangeRequest()
        request.key = Data(key.utf8)
        request.rangeEnd = Data(rangeEnd)
        request.limit = limit
        request.revision = revision
        request.keysOnly = keysOnly
        request.sortOrder = descending ? .descend : .ascend
        request.sortTarget = .key
        return try await withMember { [request] grpc, options in
            try await Etcdserverpb_KV.Client(wrapping: grpc).range(request, options: options)
        }
    }

    /// The value of `key` with its revisions, or `nil`.
    public func get(_ key: String) async throws -> (value: Mvccpb_KeyValue?, revision: Int64) {
        let response = try await range(key)
        return (response.kvs.first, response.header.revision)
    }

    /// Every key under `prefix` after `startKey` (or from the start), `limit` at a time, in key order.
    public func list(prefix: String, after startKey: String? = nil, limit: Int64 = 0, keysOnly: Bool = false)
        async throws -> Etcdserverpb_RangeResponse
    {
        let from = startKey.map { $0 + "\u{0}" } ?? prefix
        return try await range(from, rangeEnd: Self.prefixEnd(prefix), limit: limit, keysOnly: keysOnly)
    }

    public func put(_ key: String, _ value: [UInt8], lease: Int64 = 0) async throws {
        var request = Etcdserverpb_PutRequest()
        request.key = Data(key.utf8)
        request.value = Data(value)
        request.lease = lease
        _ = try await withMember { [request] grpc, options in
            try await Etcdserverpb_KV.Client(wrapping: grpc).put(request, options: options)
        }
    }

    /// One transaction: `success` if every compare holds, else `failure`, atomically.
    public func txn(_ request: Etcdserverpb_TxnRequest) async throws -> Etcdserverpb_TxnResponse {
        try await withMember { [request] grpc, options in
            try await Etcdserverpb_KV.Client(wrapping: grpc).txn(request, options: options)
        }
    }

    /// Discards etcd's history before `revision`: the values of keys deleted or overwritten before it can no
    /// longer be read at an older revision. (Their bytes leave etcd's file at its next defragmentation.)
    public func compact(revision: Int64) async throws {
        var request = Etcdserverpb_CompactionRequest()
        request.revision = revision
        _ = try await withMember { [request] grpc, options in
            try await Etcdserverpb_KV.Client(wrapping: grpc).compact(request, options: options)
        }
    }

    // MARK: Leases

    /// A new lease of `seconds`; returns its id and the TTL etcd granted.
    public func grantLease(seconds: Int64) async throws -> (id: Int64, ttl: Int64) {
        var request = Etcdserverpb_LeaseGrantRequest()
        request.ttl = seconds
        let response = try await withMember { [request] grpc, options in
            try await Etcdserverpb_Lease.Client(wrapping: grpc).leaseGrant(request, options: options)
        }
        guard response.error.isEmpty else { throw EtcdError("etcd refused a lease: \(response.error)") }
        return (response.id, response.ttl)
    }

    /// Revokes `lease` (its keys are deleted).
    public func revokeLease(_ lease: Int64) async throws {
        var request = Etcdserverpb_LeaseRevokeRequest()
        request.id = lease
        _ = try await withMember { [request] grpc, options in
            try await Etcdserverpb_Lease.Client(wrapping: grpc).leaseRevoke(request, options: options)
        }
    }

    /// Keeps `lease` alive on one stream, renewing it every `interval` and calling `renewed` with each TTL
    /// etcd grants, until the lease is gone (returns), or the stream fails or no renewal is answered within
    /// `deadline` (throws): etcd's `KeepAlive`.
    public func keepAlive(
        _ lease: Int64, every interval: Duration, deadline: Duration, renewed: @escaping @Sendable () -> Void
    ) async throws {
        var request = Etcdserverpb_LeaseKeepAliveRequest()
        request.id = lease
        let answered = Mutex(ContinuousClock.now)
        try await withWatchMember { [request] grpc, options in
            try await Etcdserverpb_Lease.Client(wrapping: grpc).leaseKeepAlive(options: options) { writer in
                while true {
                    guard ContinuousClock.now - answered.withLock({ $0 }) < deadline else {
                        throw EtcdError("etcd did not renew the lease within \(deadline)")
                    }
                    try await writer.write(request)
                    try await Task.sleep(for: interval)
                }
            } onResponse: { response in
                for try await message in response.messages {
                    guard message.ttl > 0 else { return }
                    answered.withLock { $0 = .now }
                    renewed()
                }
                throw EtcdError("etcd ended a lease keep-alive")
            }
        }
    }

    // MARK: Maintenance

    /// The alarms raised in the cluster (`NOSPACE`, `CORRUPT`).
    public func alarms() async throws -> [Etcdserverpb_AlarmMember] {
        var request = Etcdserverpb_AlarmRequest()
        request.action = .get
        return try await withMember { [request] grpc, options in
            try await Etcdserverpb_Maintenance.Client(wrapping: grpc).alarm(request, options: options).alarms
        }
    }

    // MARK: Keys

    /// The end of the range of every key beginning with `prefix` (etcd's `clientv3.GetPrefixRangeEnd`).
    public static func prefixEnd(_ prefix: String) -> [UInt8] {
        var bytes = Array(prefix.utf8)
        while let last = bytes.last {
            if last < 0xFF {
                bytes[bytes.count - 1] = last + 1
                return bytes
            }
            bytes.removeLast()
        }
        return [0]
    }

    /// `host` and `port` of `host:port`, `http://host:port`.
    static func address(_ endpoint: String) throws -> (String, Int) {
        var text = Substring(endpoint)
        if text.hasPrefix("http://") { text = text.dropFirst("http://".count) }
        while text.hasSuffix("/") { text = text.dropLast() }
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]),
            (1...65535).contains(port), colon > text.startIndex
        else {
            throw EtcdError("etcd endpoint \(endpoint) is not host:port")
        }
        return (String(text[..<colon]), port)
    }
}
