/// What the writer has done since the ledger was opened: group-commit batch sizes and commit latency.
public struct WriterStatistics: Sendable, Equatable {
    /// Write transactions committed (or failed).
    public private(set) var commits = 0
    public private(set) var requests = 0
    public private(set) var operations = 0
    /// Time spent in write transactions, including the durable commit.
    public private(set) var commitTime: Duration = .zero

    mutating func record(requests: Int, operations: Int, duration: Duration) {
        commits += 1
        self.requests += requests
        self.operations += operations
        commitTime += duration
    }
}
