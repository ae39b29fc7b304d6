import LedgerCluster
import LedgerCore
import Testing

@Suite("ClusterKeys: the layout in etcd")
struct ClusterKeysTests {
    let keys = ClusterKeys()
    let project = try! ProjectID("shop")

    @Test("block keys sort by seq: 20 digits, so etcd's byte order is seq order")
    func blockKeysSortBySeq() {
        let seqs: [UInt64] = [1, 9, 10, 99, 100, 12_345, UInt64.max]
        let blockKeys = seqs.map { keys.block(project, firstSeq: $0) }
        #expect(blockKeys == blockKeys.sorted())
        #expect(blockKeys.map { ClusterKeys.seq(inBlockKey: $0) } == seqs)
        #expect(ClusterKeys.seq(inBlockKey: keys.tail(project)) == nil)
        #expect(ClusterKeys.seq(inBlockKey: "/topicledger/projects/shop/blocks/123") == nil)
    }

    @Test("every key of a project is under its prefix, and names it back")
    func projectKeys() {
        for key in [
            keys.leader(project), keys.tail(project), keys.block(project, firstSeq: 7),
            keys.applied(project, node: "n1"), keys.state(project, node: "n1"),
        ] {
            #expect(key.hasPrefix(keys.project(project)))
            #expect(keys.projectName(in: key) == "shop")
        }
        #expect(keys.projectName(in: keys.member("n1")) == nil)
        // One project's prefix is not another's whose name begins with it.
        #expect(!keys.leader(try! ProjectID("shopping")).hasPrefix(keys.project(project)))
    }

    @Test("a prefix's range end is the first key after every key with the prefix")
    func prefixEnd() {
        #expect(EtcdClient.prefixEnd("/a/") == Array("/a0".utf8))
        #expect(EtcdClient.prefixEnd("a\u{7F}") == [0x61, 0x80])
        #expect(EtcdClient.prefixEnd("") == [0])
    }
}
