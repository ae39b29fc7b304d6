import Logging

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The process's limit on open files, and the connection cap it leaves room for.
///
/// Every connection holds a descriptor, and the ``ConnectionLimiter`` can close a connection past its cap only
/// after accepting it. If the cap is above what the process may open, `accept` fails first (`EMFILE`): the
/// connections past the limit wait unanswered in the kernel's queue, `/healthz` with them, until idle ones
/// time out — and the ledgers' own files (a checkpoint, a backup) fail to open meanwhile. So `ledger serve`
/// and `ledger witness` raise their soft limit to the hard one at start, as Go's runtime does for every program (systemd's default
/// soft limit is 1,024, its hard one 524,288, for programs to raise when they do not use `select`), and
/// lowers the cap to what the limit leaves room for when even the hard limit is too low.
public enum FileDescriptorLimit {
    /// Descriptors kept for everything but connections: standard streams, the listening socket, the event
    /// loops' epoll and wake-up descriptors, the random source, then each project's ledger (data file, lock
    /// file, the meta page's synchronous descriptor, the writer lock) and the files a checkpoint or a backup
    /// opens. An idle dev server holds 17 before its ledger opens.
    public static func reserve(projects: Int) -> Int { 64 + 8 * max(0, projects) }

    /// Raises the soft limit on open files to the hard limit; returns the soft limit in force afterwards, or
    /// `nil` when it cannot be read. A limit the kernel refuses to raise is left as it was.
    public static func raiseToHardLimit() -> UInt64? {
        var limit = rlimit()
        guard getrlimit(resource, &limit) == 0 else { return nil }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(resource, &raised) == 0 { return UInt64(raised.rlim_cur) }
        }
        return UInt64(limit.rlim_cur)
    }

    /// The connection cap the server can honour: `requested`, or what `limit` leaves once `reserve` is kept
    /// (at least 1) when that is less. With the limit unknown, `requested`.
    public static func connectionCap(requested: Int, limit: UInt64?, reserve: Int) -> Int {
        guard let limit else { return requested }
        let room = limit > UInt64(Int.max) ? Int.max : Int(limit) - max(0, reserve)
        return max(1, min(requested, room))
    }

    #if canImport(Glibc)
        private static let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
    #else
        private static let resource = RLIMIT_NOFILE
    #endif
}

extension ConnectionLimits {
    /// Raises the process's limit on open files to its hard limit (``FileDescriptorLimit/raiseToHardLimit()``) and
    /// lowers ``maximumConnections`` to what that leaves room for beside `reserve` descriptors
    /// (``FileDescriptorLimit/connectionCap(requested:limit:reserve:)``), saying so in a warning when it must.
    ///
    /// - Parameters:
    ///   - reserve: The descriptors kept for everything but connections (``FileDescriptorLimit/reserve(projects:)``).
    ///   - logger: Where a lowered cap is warned of.
    public mutating func fitOpenFiles(reserve: Int, logger: Logger) {
        let openFiles = FileDescriptorLimit.raiseToHardLimit()
        let cap = FileDescriptorLimit.connectionCap(requested: maximumConnections, limit: openFiles, reserve: reserve)
        if cap < maximumConnections, let openFiles {
            let message =
                "this process may open \(openFiles) files: connections are capped at \(cap), not"
                + " \(maximumConnections). Raise the hard limit on open files (ulimit -Hn,"
                + " systemd's LimitNOFILE=) or lower --max-connections."
            logger.warning("\(message)")
        }
        maximumConnections = cap
    }
}
