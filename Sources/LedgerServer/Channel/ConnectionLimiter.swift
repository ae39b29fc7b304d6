import Logging
import NIOCore
import Synchronization

/// Caps the connections a server holds open at once, in all and per client address
/// (``ConnectionLimits/maximumConnections``, ``ConnectionLimits/maximumConnectionsPerAddress``): a connection beyond
/// either cap is closed as soon as it is accepted, so a flood of idle or slow connections (a slowloris) cannot take
/// every file descriptor and stop `/healthz`, and one address cannot take the whole cap — together with the idle
/// timeout, which closes a connection that has not sent a whole request head in time.
///
/// Each refusal is counted (``exposition()``: `topicledger_connections_refused_total{reason}`) and warned of at most
/// once a minute per cap, never with the client's address: a flood would otherwise write a line per connection, and
/// the log is no place for who connected (the kernel's `ss` says who holds connections now).
///
/// - Note: Thread-safe; one instance is shared by every connection of a server.
final class ConnectionLimiter: Sendable {
    /// Which cap a connection was over.
    enum Refusal: Int, CaseIterable, Sendable {
        case serverCap, addressCap

        /// Its `reason` label in `/metrics`.
        var label: String { self == .serverCap ? "server_cap" : "address_cap" }
    }

    let maximum: Int
    let maximumPerAddress: Int
    private let logger: Logger
    private let open = Atomic<Int>(0)
    private let refusedOverServerCap = Atomic<UInt64>(0)
    private let refusedOverAddressCap = Atomic<UInt64>(0)
    private let state = Mutex(State())

    private struct State {
        var perAddress: [ClientNetwork: Int] = [:]
        var lastWarned: [Refusal: ContinuousClock.Instant] = [:]
    }

    /// The least time between two warnings of one cap.
    static let warningInterval: Duration = .seconds(60)

    init(limits: ConnectionLimits, logger: Logger) {
        maximum = limits.maximumConnections
        maximumPerAddress = limits.maximumConnectionsPerAddress
        self.logger = logger
    }

    /// The connections open now (those being closed for a cap included, until they are).
    var current: Int { open.load(ordering: .relaxed) }

    /// The connections refused over `cap` since the server started.
    func refused(_ cap: Refusal) -> UInt64 {
        switch cap {
        case .serverCap: refusedOverServerCap.load(ordering: .relaxed)
        case .addressCap: refusedOverAddressCap.load(ordering: .relaxed)
        }
    }

    /// The connection series in the Prometheus text format, for a server's `GET /metrics`.
    func exposition() -> String {
        var text = "# HELP topicledger_connections_open Connections open now\n"
        text += "# TYPE topicledger_connections_open gauge\ntopicledger_connections_open \(current)\n"
        text += "# HELP topicledger_connections_refused_total Connections closed as they arrived, over the server's cap"
        text += " (server_cap: maxConnections) or their address's (address_cap: maxConnectionsPerAddress)\n"
        text += "# TYPE topicledger_connections_refused_total counter\n"
        for cap in Refusal.allCases {
            text += "topicledger_connections_refused_total{reason=\"\(cap.label)\"} \(refused(cap))\n"
        }
        return text
    }

    /// A handler for one connection's pipeline.
    func handler() -> Handler { Handler(limiter: self) }

    /// Counts a connection from `address` in; the cap it is over, if any. It stays counted until ``release(_:)``,
    /// refused or not, so that every admission has exactly one release.
    private func admit(_ address: ClientNetwork) -> Refusal? {
        let total = open.wrappingAdd(1, ordering: .relaxed).newValue
        let fromAddress =
            state.withLock { state in
                let count = state.perAddress[address, default: 0] + 1
                state.perAddress[address] = count
                return count
            }
        let refusal: Refusal? =
            if total > maximum { .serverCap } else if fromAddress > maximumPerAddress { .addressCap } else { nil }
        if let refusal { record(refusal) }
        return refusal
    }

    private func release(_ address: ClientNetwork) {
        open.wrappingSubtract(1, ordering: .relaxed)
        state.withLock { state in
            let count = (state.perAddress[address] ?? 1) - 1
            state.perAddress[address] = count > 0 ? count : nil
        }
    }

    private func record(_ refusal: Refusal) {
        let total =
            switch refusal {
            case .serverCap: refusedOverServerCap.wrappingAdd(1, ordering: .relaxed).newValue
            case .addressCap: refusedOverAddressCap.wrappingAdd(1, ordering: .relaxed).newValue
            }
        let now = ContinuousClock.now
        let warn = state.withLock { state in
            if let last = state.lastWarned[refusal], now - last < Self.warningInterval { return false }
            state.lastWarned[refusal] = now
            return true
        }
        guard warn else { return }
        let cap =
            switch refusal {
            case .serverCap: "the server holds its cap of \(maximum) connections (maxConnections)"
            case .addressCap:
                "an address holds its per-address cap of \(maximumPerAddress) connections (maxConnectionsPerAddress)"
            }
        logger.warning(
            "refusing connections: \(cap); warned at most once a minute",
            metadata: ["ledger.refusedConnections": "\(total)"])
    }

    final class Handler: ChannelInboundHandler, RemovableChannelHandler {
        // Parts pass through untouched; the handler only watches the connection open and close.
        typealias InboundIn = NIOAny
        private let limiter: ConnectionLimiter
        private var counted = false
        private var address = ClientNetwork(nil)

        init(limiter: ConnectionLimiter) { self.limiter = limiter }

        func handlerAdded(context: ChannelHandlerContext) {
            if context.channel.isActive { admit(context) }
        }

        func channelActive(context: ChannelHandlerContext) {
            admit(context)
            context.fireChannelActive()
        }

        func channelInactive(context: ChannelHandlerContext) {
            release()
            context.fireChannelInactive()
        }

        func handlerRemoved(context: ChannelHandlerContext) { release() }

        private func admit(_ context: ChannelHandlerContext) {
            guard !counted else { return }
            counted = true
            address = ClientNetwork(context.channel.remoteAddress)
            if limiter.admit(address) != nil {
                context.close(promise: nil)
            }
        }

        private func release() {
            guard counted else { return }
            counted = false
            limiter.release(address)
        }
    }
}
