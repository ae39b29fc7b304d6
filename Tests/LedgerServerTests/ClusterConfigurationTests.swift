import Crypto
import Foundation
import LedgerCluster
import LedgerCore
import LedgerServer
import LedgerTestSupport
import Testing

@Suite("The config file's cluster section")
struct ClusterConfigurationTests {
    let key = "sha256:" + String(repeating: "ab", count: 32)

    func load(_ cluster: String) throws -> ServerConfiguration {
        let path = TemporaryDirectory("config").path + "/config.json"
        try Data(#"{"projects": {"shop": {"adminKeys": ["\#(key)"]}}, "cluster": \#(cluster)}"#.utf8)
            .write(to: URL(fileURLWithPath: path))
        return try ServerConfiguration.load(path: path)
    }

    @Test("its members become the node's cluster configuration; what it leaves out keeps the defaults")
    func readsTheSection() throws {
        let peer = "sha256:" + String(repeating: "CD", count: 32)
        let configuration = try load(
            #"{"nodeId": "n1", "advertiseURL": "http://10.0.0.1:8080", "etcdEndpoints": ["10.0.0.1:2379"], "#
                + #""leaseSeconds": 3, "peerKeys": ["\#(peer)"], "maximumBlockBytes": 65536}"#)
        let cluster = try #require(configuration.cluster)
        #expect(cluster.nodeID == "n1")
        #expect(cluster.advertiseURL == "http://10.0.0.1:8080")
        #expect(cluster.etcdEndpoints == ["10.0.0.1:2379"])
        #expect(cluster.leaseSeconds == 3)
        #expect(cluster.replicas == 3)
        #expect(cluster.maximumBlockBytes == 65536)
        #expect(cluster.peerKeys == [peer.lowercased()])
        #expect(cluster.problem == nil)
        // Left for the flags: parsed, and said to be incomplete until they fill it.
        #expect(try load("{}").cluster?.problem?.contains("nodeId") == true)
        // No section: one node, no etcd.
        let path = TemporaryDirectory("config").path + "/config.json"
        try Data(#"{"projects": {"shop": {"adminKeys": ["\#(key)"]}}}"#.utf8).write(to: URL(fileURLWithPath: path))
        #expect(try ServerConfiguration.load(path: path).cluster == nil)
    }

    @Test("an unknown member, a number out of range, a malformed peer key or a wrong type is refused, naming it")
    func refusesMistakes() {
        let cases: [(String, String)] = [
            (#"{"nodeID": "n1"}"#, "cluster.nodeID"),
            (#"{"leaseSeconds": 0}"#, "cluster.leaseSeconds"),
            (#"{"leaseSeconds": 1.5}"#, "cluster.leaseSeconds"),
            (#"{"leaseSeconds": 99999999999999999999}"#, "cluster.leaseSeconds"),
            (#"{"replicas": 100}"#, "cluster.replicas"),
            (#"{"maximumBlockBytes": 2000000}"#, "cluster.maximumBlockBytes"),
            (#"{"peerKeys": ["sha256:xyz"]}"#, "cluster.peerKeys"),
            (#"{"etcdEndpoints": "10.0.0.1:2379"}"#, "cluster.etcdEndpoints"),
            (#"{"nodeId": 7}"#, "cluster.nodeId"),
            (#"[]"#, "cluster"),
        ]
        for (section, field) in cases {
            #expect(
                performing: { try load(section) },
                throws: { error in (error as? LedgerCoreError)?.field?.hasSuffix(field) == true })
        }
    }

    @Test(
        "peerSecretFile: its secret is read when its sha256 is a peer key; a wrong, empty, missing, others-readable or not regular file is refused"
    )
    func peerSecretFile() throws {
        let directory = TemporaryDirectory("peer").path
        let secret = "cluster-peer-secret"
        let peerKey = "sha256:" + Array(SHA256.hash(data: Array(secret.utf8))).hexString.uppercased()
        func section(_ file: String) -> String { #"{"peerKeys": ["\#(peerKey)"], "peerSecretFile": "\#(file)"}"# }
        func write(_ text: String, to name: String, mode: mode_t = 0o600) throws {
            try Data(text.utf8).write(to: URL(fileURLWithPath: directory + "/" + name))
            chmod(directory + "/" + name, mode)
        }
        try write(secret + "\n", to: "right")
        #expect(try load(section(directory + "/right")).cluster?.peerSecret == secret)
        try write("another-secret", to: "wrong")
        try write(" \n", to: "empty")
        try write(secret + "\n", to: "readable", mode: 0o644)
        #expect(mkfifo(directory + "/fifo", 0o600) == 0)
        for file in ["wrong", "empty", "missing", "readable", "fifo"] {
            #expect(
                performing: { try load(section(directory + "/" + file)) },
                throws: { error in (error as? LedgerCoreError)?.field?.hasSuffix("cluster.peerSecretFile") == true })
        }
    }
}
