import Foundation
import LMDBKit
import Testing
import LedgerTestSupport

private func withScratchEnvironment<R>(
    _ configure: (inout LMDBEnvironment.Options) -> Void = { _ in }, _ body: (LMDBEnvironment) throws -> R
) throws -> R {
    let path = NSTemporaryDirectory() + "lmdbkit-failure-\(UUID().uuidString)"
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: path) }
    var options = LMDBEnvironment.Options()
    configure(&options)
    return try body(try LMDBEnvironment(path: path, options: options))
}

private struct Unrelated: Error {}

/// The GRDB `checkForAbortedTransaction` rule: once an LMDB call of a transaction failed, it never commits,
/// whatever the caller did with the error.
@Suite("LMDBKit transaction failures", .offThePool)
struct TransactionFailureTests {
    @Test("a caught MDB_BAD_VALSIZE (a 512-byte key) aborts the transaction: the put before it is not committed")
    func caughtBadValueSize() throws {
        try withScratchEnvironment { env throws in
            let db = try env.write { try $0.openDatabase("plain", flags: .create) }
            var caught: LMDBError?
            #expect(throws: LMDBError.self) {
                try env.write { txn throws in
                    try txn.put(db, key: "first", value: "kept?")
                    do {
                        try txn.put(db, key: String(repeating: "q", count: 512), value: "too long")
                    } catch {
                        caught = error as? LMDBError  // swallowed: the body returns normally
                    }
                }
            }
            #expect(caught?.code == .badValueSize)
            try env.read { txn throws in #expect(try txn.count(db) == 0) }
            // The environment is fine afterwards.
            try env.write { txn throws in try txn.put(db, key: "second", value: "ok") }
            try env.read { txn throws in #expect(try txn.value(in: db, forKey: "second") == Array("ok".utf8)) }
        }
    }

    @Test("a swallowed MDB_MAP_FULL still grows the map and runs the body again")
    func swallowedMapFull() throws {
        try withScratchEnvironment({ $0.mapSize = 1 << 20 }) { env throws in
            let db = try env.write { try $0.openDatabase("plain", flags: .create) }
            let value = [UInt8](repeating: 7, count: 4000)
            var runs = 0
            try env.write { txn throws in
                runs += 1
                do {
                    for index in 0..<2000 { try txn.put(db, key: UInt64(index), value: value) }
                } catch {
                    throw Unrelated()  // what the old per-request `Result` did: the LMDB code is gone
                }
            }
            #expect(runs > 1)
            #expect(env.mapSize > 1 << 20)
            try env.read { txn throws in #expect(try txn.count(db) == 2000) }
        }
    }

    @Test("the fault injector fails the k-th call of a write transaction; a caught failure still aborts")
    func injectedFailure() throws {
        for code in [LMDBError.Code.ioError, .noSpace, .badValueSize] {
            for failing in 1...6 {
                let injector = LMDBFaultInjector { transaction, call in
                    transaction == 2 && call == failing ? code : nil
                }
                try withScratchEnvironment({ $0.faultInjector = injector }) { env throws in
                    let db = try env.write { try $0.openDatabase("plain", flags: .create) }  // transaction 1
                    var thrown: (any Error)?
                    do {
                        try env.write { txn throws in  // transaction 2: every error swallowed
                            for index in 0..<4 { _ = try? txn.put(db, key: UInt64(index), value: "v") }
                            _ = try? txn.count(db)
                        }
                    } catch {
                        thrown = error
                    }
                    #expect((thrown as? LMDBError)?.code == code, "call \(failing) failing with \(code)")
                    try env.read { txn throws in #expect(try txn.count(db) == 0) }
                    try env.write { txn throws in try txn.put(db, key: UInt64(9), value: "after") }  // transaction 3
                    try env.read { txn throws in #expect(try txn.count(db) == 1) }
                }
            }
        }
    }
}
