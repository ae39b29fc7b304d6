import EtcdAPI
import LedgerCore
import LedgerStore

/// A replica holds events past the log it shares with etcd, which this node committed ahead of etcd while it
/// led (``ReplicationGate/commitsAhead``) and etcd never took: nobody was told they were written. They are
/// rolled back to `seq` (``ReplicaHost/rollBack(_:after:)``), and the replica catches up from there — as a Raft
/// follower truncates a deposed leader's uncommitted suffix.
struct ReplicaAhead: Error, CustomStringConvertible {
    let head: UInt64
    let seq: UInt64
    var description: String {
        "this replica's seqs \(seq + 1)…\(head) were committed ahead of etcd, which did not take them"
    }
}

extension ReplicaReseeder {
    /// What to do with a replica whose log leaves etcd's (`fork` says how): roll back an unacknowledged suffix
    /// (``ReplicaAhead``) when the ledger marks everything past one of etcd's commit ends as written ahead
    /// (``LedgerSnapshot/clusterHeld()``) and that commit end is the same here; otherwise it is a fork, kept
    /// aside and replaced by a peer's copy.
    ///
    /// Reads etcd's blocks from the replica's head (or the tail, if lower) down, at `revision`, and no lower
    /// than the mark.
    func aheadOrForked(_ fork: ReplicaForked, ledger: Ledger, tail: ReplicationTail, revision: Int64) async throws
        -> any Error
    {
        let (head, held) = try ledger.read { (try $0.head(), try $0.clusterHeld()) }
        guard let held, head.seq > held else { return forked(fork) }
        func matches(_ seq: UInt64, _ hash: [UInt8]) throws -> Bool {
            try seq >= held && seq <= head.seq && ledger.read { try $0.hash(at: seq) } == hash
        }
        if try matches(tail.seq, tail.hash) { return ReplicaAhead(head: head.seq, seq: tail.seq) }
        var upper = min(head.seq, tail.seq)
        var earliest: UInt64?
        while upper >= held {
            let page = try await node.etcd.range(
                node.keys.blocks(project), rangeEnd: Array(node.keys.block(project, firstSeq: upper + 1).utf8),
                limit: 64, revision: revision, descending: true)
            guard !page.kvs.isEmpty else { break }
            for kv in page.kvs {
                let stored = try StoredBlock(decoding: kv.value)
                let block = stored.block
                earliest = block.firstSeq
                if block.lastSeq < held { return forked(fork) }
                if block.lastSeq == stored.commitLastSeq, try matches(block.lastSeq, block.lastHash) {
                    return ReplicaAhead(head: head.seq, seq: block.lastSeq)
                }
            }
            guard let earliest, earliest > 1 else { break }
            upper = earliest - 1
        }
        // Nothing in common but the empty log: everything here was written ahead of an empty cluster log.
        if held == 0, earliest == nil || earliest == 1 { return ReplicaAhead(head: head.seq, seq: 0) }
        return forked(fork)
    }
}
