import LedgerCluster
import ServiceLifecycle
import Synchronization

/// The requests this node is forwarding, each given up when the node it went to no longer serves it (the leader
/// died and another was elected): AsyncHTTPClient would otherwise go on trying to connect to a dead node until the
/// request's deadline (async-http-client#743).
///
/// One loop for them all, run beside the server as a service: it asks each request whether its node still serves
/// it at every change of the cluster's routing (``ClusterNode/waitForRoutingChange(after:upTo:)``), and at least
/// every ``recheckInterval``, and gives up those it does not. A watcher task (with its timer) per forwarded request
/// cost more CPU than the forwarding itself.
///
/// It ends at graceful shutdown, after the HTTP server (the last service, so the first to stop) has answered the
/// requests in flight.
///
/// - Note: Thread-safe.
final class ForwardWatch: Service, Sendable {
    static let recheckInterval: Duration = .seconds(5)

    private struct Entry {
        let stillThere: @Sendable () -> Bool
        let giveUp: @Sendable () -> Void
    }

    private struct State {
        var nextID = 0
        var entries: [Int: Entry] = [:]
    }

    private let cluster: ClusterNode
    private let state = Mutex(State())

    init(cluster: ClusterNode) {
        self.cluster = cluster
    }

    /// Watches a request forwarded to a node for as long as it is in flight: `giveUp` is called (once, on the
    /// watch's loop) when `stillThere` says that node no longer serves it. Returns the id to ``end(_:)`` it with.
    func begin(stillThere: @escaping @Sendable () -> Bool, giveUp: @escaping @Sendable () -> Void) -> Int {
        state.withLock { state in
            defer { state.nextID += 1 }
            state.entries[state.nextID] = Entry(stillThere: stillThere, giveUp: giveUp)
            return state.nextID
        }
    }

    /// The request `id` has its answer (or failed): it is no longer watched.
    func end(_ id: Int) {
        _ = state.withLock { $0.entries.removeValue(forKey: id) }
    }

    func run() async {
        // Returns, never throws, when it is told to shut down (as ``DeliverySweeper``).
        await cancelWhenGracefulShutdown { [self] in
            while !Task.isCancelled {
                // The generation is read before the routes are: a change in between is still waited for.
                let generation = cluster.routingGeneration
                let entries = state.withLock { $0.entries }
                // Asked outside the lock: a route reads the cluster's state, which takes locks of its own.
                let gone = entries.filter { !$0.value.stillThere() }
                if !gone.isEmpty {
                    state.withLock { state in for id in gone.keys { state.entries[id] = nil } }
                    for entry in gone.values { entry.giveUp() }
                }
                _ = await cluster.waitForRoutingChange(after: generation, upTo: Self.recheckInterval)
            }
        }
    }
}
