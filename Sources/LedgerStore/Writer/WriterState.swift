/// What the writer keeps from one transaction to the next; only the writer's thread touches it.
struct WriterState {
    /// Where the next move of recent memberships starts.
    var moveCursor = RecentMemberships.MoveCursor()
    /// What the writer knows about instances between transactions.
    var instances = WriterInstanceCache()
    /// The thread that encodes and chains a large transaction's events while the writer decides the next
    /// (``EventChainer``).
    let chainWorker = SerialWorker<BlockingJob, Void>(name: "ledger-chain")
    /// A stop of the writes (the data file replaced or removed) has been logged.
    var stopReported = false
}
