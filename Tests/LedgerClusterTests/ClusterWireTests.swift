import Foundation
import LedgerCore
import LedgerStore
import SwiftProtobuf
import Testing

@testable import LedgerCluster

@Suite("The cluster's values in etcd: blocks, tails and endpoints, decoded without trapping")
struct ClusterWireTests {
    func records(_ count: Int) -> (records: [[UInt8]], last: [UInt8]) {
        var hash = HashChain.genesis
        var records: [[UInt8]] = []
        for index in 0..<count {
            var record: [UInt8] = []
            HashChain.appendRecord(
                of: LedgerEvent(
                    seq: UInt64(index + 1), time: LedgerTime(microseconds: 1), actor: "t", requestID: "r",
                    body: .registered(token: try! RegistrationToken("t\(index):APA91b"), platform: nil, appID: nil)),
                chainingFrom: &hash, to: &record)
            records.append(record)
        }
        return (records, hash)
    }

    @Test("a block survives its etcd value, and its tail is the last record's hash")
    func blockRoundTrip() throws {
        let (records, last) = records(5)
        let block = ReplicatedBlock(firstSeq: 1, previousHash: HashChain.genesis, records: records)
        let stored = StoredBlock(block: block, commitLastSeq: 9, leader: "n1")
        let decoded = try StoredBlock(decoding: Data(try stored.encoded()))
        #expect(decoded.block == block)
        #expect(decoded.commitLastSeq == 9)
        #expect(decoded.leader == "n1")
        #expect(block.lastHash == last)
        let tail = ReplicationTail(seq: 5, hash: last)
        #expect(try ReplicationTail(decoding: Data(tail.encoded)) == tail)
    }

    @Test("malformed values are refused with an error: garbage, a short hash, no records, seqs that overflow")
    func malformedBlocksAreRefused() throws {
        let (records, _) = records(2)
        func encoded(_ edit: (inout Topicledger_Cluster_ReplicationBlock) -> Void) throws -> Data {
            var message = Topicledger_Cluster_ReplicationBlock()
            message.firstSeq = 1
            message.previousHash = Data(HashChain.genesis)
            message.records = records.map { Data($0) }
            message.commitLastSeq = 2
            edit(&message)
            return try message.serializedData()
        }
        let cases: [Data] = [
            Data([0xFF, 0xFF, 0xFF]),
            try encoded { $0.previousHash = Data([1, 2, 3]) },
            try encoded { $0.records = [] },
            try encoded { $0.firstSeq = 0 },
            try encoded { $0.firstSeq = UInt64.max },
            try encoded { $0.commitLastSeq = 1 },
        ]
        for value in cases {
            #expect(throws: EtcdError.self) { try StoredBlock(decoding: value) }
        }
        #expect(try StoredBlock(decoding: try encoded { _ in }).block.records == records)
        let zeros = String(repeating: "0", count: 64)
        for tail in ["", "12", "x abc", "18446744073709551616 " + zeros, "18446744073709551615 " + zeros, "1 zz"] {
            #expect(throws: EtcdError.self) { try ReplicationTail(decoding: Data(tail.utf8)) }
        }
    }

    @Test("a commit's parts make the commit only once its last part is among them")
    func commitOfParts() {
        let (records, _) = records(6)
        let block = ReplicatedBlock(firstSeq: 1, previousHash: HashChain.genesis, records: records)
        let parts = block.split(maximumBytes: records[0].count * 2).map {
            StoredBlock(block: $0, commitLastSeq: 6, leader: "n1")
        }
        #expect(parts.count == 3)
        #expect(StoredBlock.commit(of: []) == nil)
        #expect(StoredBlock.commit(of: Array(parts.prefix(2))) == nil)
        #expect(StoredBlock.commit(of: parts) == block)
    }

    @Test("endpoints are host:port, with or without http://; anything else is refused")
    func endpoints() throws {
        #expect(try EtcdClient.address("127.0.0.1:2379") == ("127.0.0.1", 2379))
        #expect(try EtcdClient.address("http://etcd-1:2379/") == ("etcd-1", 2379))
        for bad in ["", "etcd", ":2379", "etcd:0", "etcd:65536", "etcd:99999999999999999999", "etcd:x"] {
            #expect(throws: EtcdError.self) { try EtcdClient.address(bad) }
        }
        #expect(throws: EtcdError.self) { try EtcdClient(endpoints: []) }
    }

    @Test("a configuration that cannot be used says why")
    func configurationProblems() {
        var configuration = ClusterConfiguration(
            nodeID: "n1", advertiseURL: "http://10.0.0.1:8080", etcdEndpoints: ["10.0.0.1:2379"])
        #expect(configuration.problem == nil)
        configuration.nodeID = "n 1"
        #expect(configuration.problem?.contains("nodeId") == true)
        configuration.nodeID = "n1"
        configuration.advertiseURL = "10.0.0.1:8080"
        #expect(configuration.problem?.contains("advertiseURL") == true)
        configuration.advertiseURL = "http://10.0.0.1:8080"
        configuration.etcdEndpoints = []
        #expect(configuration.problem?.contains("etcdEndpoints") == true)
        configuration.etcdEndpoints = ["a:1"]
        configuration.leaseSeconds = 0
        #expect(configuration.problem?.contains("leaseSeconds") == true)
    }
}
