import EtcdAPI
import Foundation

extension Etcdserverpb_Compare {
    /// `key`'s create revision equals `revision` (0: the key does not exist).
    static func createRevision(of key: String, equals revision: Int64) -> Self {
        var compare = Self()
        compare.key = Data(key.utf8)
        compare.target = .create
        compare.result = .equal
        compare.createRevision = revision
        return compare
    }

    /// `key`'s version equals `version` (0: the key does not exist).
    static func version(of key: String, equals version: Int64) -> Self {
        var compare = Self()
        compare.key = Data(key.utf8)
        compare.target = .version
        compare.result = .equal
        compare.version = version
        return compare
    }

    /// `key`'s value is `value`.
    static func value(of key: String, equals value: [UInt8]) -> Self {
        var compare = Self()
        compare.key = Data(key.utf8)
        compare.target = .value
        compare.result = .equal
        compare.value = Data(value)
        return compare
    }
}

extension Etcdserverpb_RequestOp {
    static func put(_ key: String, _ value: [UInt8], lease: Int64 = 0) -> Self {
        var put = Etcdserverpb_PutRequest()
        put.key = Data(key.utf8)
        put.value = Data(value)
        put.lease = lease
        var op = Self()
        op.requestPut = put
        return op
    }

    static func range(_ key: String) -> Self {
        var range = Etcdserverpb_RangeRequest()
        range.key = Data(key.utf8)
        var op = Self()
        op.requestRange = range
        return op
    }

    static func deleteRange(_ key: String, rangeEnd: [UInt8]) -> Self {
        var delete = Etcdserverpb_DeleteRangeRequest()
        delete.key = Data(key.utf8)
        delete.rangeEnd = Data(rangeEnd)
        var op = Self()
        op.requestDeleteRange = delete
        return op
    }
}
