import Foundation
import LMDBKit
import PropertyBased
import Testing
import LedgerTestSupport

private func withEnvironment<R>(
    configure: (inout LMDBEnvironment.Options) -> Void = { _ in }, _ body: (LMDBEnvironment) throws -> R
) throws -> R {
    let path = NSTemporaryDirectory() + "lmdbkit-\(UUID().uuidString)"
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: path) }
    var options = LMDBEnvironment.Options()
    configure(&options)
    let environment = try LMDBEnvironment(path: path, options: options)
    return try body(environment)
}

private struct Boom: Error {}

/// A duplicate-sorted database of fixed-size values, for the model checks.
private func openDuplicates(_ env: LMDBEnvironment) throws -> LMDBDatabase {
    try env.write { try $0.openDatabase("dups", flags: [.create, .duplicateSort, .duplicateFixed]) }
}

/// Every key's values in `db` (`UInt32` keys, `UInt64` values), read in a fresh transaction.
private func duplicateContents(_ env: LMDBEnvironment, _ db: LMDBDatabase) throws -> [UInt32: Set<UInt64>] {
    try env.read { txn throws in
        var stored: [UInt32: Set<UInt64>] = [:]
        try txn.withCursor(db) { cursor throws in
            try cursor.forEach { entry in
                stored[entry.key.loadBigEndianUInt32(), default: []].insert(entry.value.loadBigEndianUInt64())
                return true
            }
        }
        return stored
    }
}

@Suite("LMDBKit", .offThePool)
struct LMDBKitTests {
    @Test("big-endian loads: in range as stored; bytes past a short value read as zero, never out of bounds")
    func bigEndianLoads() {
        let bytes: [UInt8] = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09]
        bytes.withUnsafeBytes { buffer in
            #expect(buffer.loadBigEndianUInt64() == 0x0102_0304_0506_0708)
            #expect(buffer.loadBigEndianUInt64(at: 1) == 0x0203_0405_0607_0809)
            #expect(buffer.loadBigEndianUInt32(at: 5) == 0x0607_0809)
            // Short: the missing low-order bytes are zero.
            #expect(buffer.loadBigEndianUInt64(at: 2) == 0x0304_0506_0708_0900)
            #expect(buffer.loadBigEndianUInt32(at: 7) == 0x0809_0000)
            #expect(UnsafeRawBufferPointer(rebasing: buffer[0..<3]).loadBigEndianUInt64() == 0x0102_0300_0000_0000)
            for offset in [-8, -1, 9, 100, Int.max, Int.min] {
                #expect(buffer.loadBigEndianUInt64(at: offset) == (offset == -1 ? 0x01_0203_0405_0607 : 0))
                #expect(buffer.loadBigEndianUInt32(at: offset) == (offset == -1 ? 0x0001_0203 : 0))
            }
        }
        #expect(UnsafeRawBufferPointer(start: nil, count: 0).loadBigEndianUInt64() == 0)
    }

    @Test("put, get, overwrite and delete round-trip")
    func putGetDelete() throws {
        try withEnvironment { env throws in
            let db = try env.write { try $0.openDatabase("plain", flags: .create) }
            try env.write { txn throws in
                try txn.put(db, key: "alpha", value: [1, 2, 3] as [UInt8])
                try txn.put(db, key: UInt64(7), value: "seven")
            }
            try env.read { txn throws in
                #expect(try txn.value(in: db, forKey: "alpha") == [1, 2, 3])
                #expect(try txn.value(in: db, forKey: UInt64(7)) == Array("seven".utf8))
                #expect(try txn.value(in: db, forKey: "missing") == nil)
                #expect(try txn.count(db) == 2)
            }
            try env.write { txn throws in
                #expect(try txn.put(db, key: "alpha", value: [9] as [UInt8], flags: .noOverwrite) == false)
                #expect(try txn.delete(db, key: UInt64(7)))
                #expect(try txn.delete(db, key: UInt64(7)) == false)
            }
            try env.read { txn throws in
                #expect(try txn.value(in: db, forKey: "alpha") == [1, 2, 3])
                #expect(try txn.count(db) == 1)
            }
        }
    }

    @Test("a throwing write closure aborts: nothing it wrote is visible")
    func abortOnThrow() throws {
        try withEnvironment { env throws in
            let db = try env.write { try $0.openDatabase("plain", flags: .create) }
            #expect(throws: Boom.self) {
                try env.write { txn throws in
                    try txn.put(db, key: "k", value: "v")
                    throw Boom()
                }
            }
            try env.read { txn throws in #expect(try txn.value(in: db, forKey: "k") == nil) }
        }
    }

    @Test("integer keys are big-endian and iterate in numeric order")
    func integerOrder() throws {
        try withEnvironment { env throws in
            let db = try env.write { try $0.openDatabase("ints", flags: .create) }
            let keys: [UInt64] = [300, 1, 256, 65_536, 2, 1 << 40]
            try env.write { txn in for key in keys { try txn.put(db, key: key, value: [UInt8]()) } }
            var seen: [UInt64] = []
            try env.read { txn throws in
                try txn.withCursor(db) { cursor throws in
                    try cursor.forEach { entry in
                        seen.append(entry.key.loadBigEndianUInt64())
                        return true
                    }
                }
            }
            #expect(seen == keys.sorted())
        }
    }

    @Test("duplicate-sorted databases: sorted values, counts, range seeks, exact deletes")
    func duplicates() throws {
        try withEnvironment { env throws in
            let db = try env.write { try $0.openDatabase("dups", flags: [.create, .duplicateSort, .duplicateFixed]) }
            try env.write { txn throws in
                for value in [UInt32(30), 10, 20] { try txn.put(db, key: UInt32(1), value: value) }
                try txn.put(db, key: UInt32(2), value: UInt32(5))
                #expect(try txn.put(db, key: UInt32(1), value: UInt32(20), flags: .noDuplicateData) == false)
            }
            try env.read { txn throws in
                try txn.withCursor(db) { cursor throws in
                    var values: [UInt32] = []
                    try cursor.forEachValue(of: UInt32(1)) {
                        values.append($0.loadBigEndianUInt32()); return true
                    }
                    #expect(values == [10, 20, 30])
                    _ = try cursor.find(UInt32(1))
                    #expect(try cursor.duplicateCount() == 3)
                    let entry = try cursor.seek(UInt32(1), value: UInt32(15))
                    #expect(entry?.value.loadBigEndianUInt32() == 20)
                    #expect(try cursor.seek(UInt32(1), value: UInt32(31)) == nil)
                    #expect(try cursor.find(UInt32(3)) == nil)
                }
            }
            try env.write { txn throws in
                #expect(try txn.delete(db, key: UInt32(1), value: UInt32(20)))
                #expect(try txn.delete(db, key: UInt32(1), value: UInt32(20)) == false)
            }
            try env.read { txn throws in #expect(try txn.count(db) == 3) }
        }
    }

    @Test("a full map grows and the write is retried")
    func mapGrowth() throws {
        try withEnvironment(configure: { $0.mapSize = 1 << 20 }) { env throws in
            let db = try env.write { try $0.openDatabase("big", flags: .create) }
            let initial = env.mapSize
            let value = [UInt8](repeating: 0xAB, count: 4096)
            try env.write { txn throws in
                for key in 0..<2_000 { try txn.put(db, key: UInt64(key), value: value) }
            }
            #expect(env.mapSize > initial)
            try env.read { txn throws in #expect(try txn.count(db) == 2_000) }
        }
    }

    @Test("a map that may not grow further reports mapFull and keeps the old data")
    func mapFullAtMaximum() throws {
        try withEnvironment(configure: {
            $0.mapSize = 1 << 20; $0.maximumMapSize = 1 << 20
        }) { env throws in
            let db = try env.write { try $0.openDatabase("big", flags: .create) }
            try env.write { try $0.put(db, key: "kept", value: "yes") }
            let value = [UInt8](repeating: 0xAB, count: 4096)
            do {
                try env.write { txn in for key in 0..<2_000 { try txn.put(db, key: UInt64(key), value: value) } }
                Issue.record("expected the write to fail")
            } catch LMDBError.Code.mapFull {
                // expected
            }
            try env.read { txn throws in
                #expect(try txn.count(db) == 1)
                #expect(try txn.value(in: db, forKey: "kept") == Array("yes".utf8))
            }
        }
    }

    @Test("opening a path that is not a directory fails with the LMDB code and function")
    func openFailure() throws {
        do {
            _ = try LMDBEnvironment(path: "/nonexistent-\(UUID().uuidString)/x")
            Issue.record("expected open to fail")
        } catch {
            #expect(error.code == .noSuchFile)
            #expect(error.function == "mdb_env_open")
            #expect(error.description.contains("mdb_env_open"))
        }
    }

    @Test("a consistent copy holds the same data")
    func copy() throws {
        try withEnvironment { env throws in
            let db = try env.write { try $0.openDatabase("plain", flags: .create) }
            try env.write { txn in for key in 0..<100 { try txn.put(db, key: UInt64(key), value: "v\(key)") } }
            let destination = NSTemporaryDirectory() + "lmdbkit-copy-\(UUID().uuidString)"
            try FileManager.default.createDirectory(atPath: destination, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: destination) }
            try env.copy(to: destination)
            let copy = try LMDBEnvironment(path: destination)
            let copied = try copy.read { try $0.openDatabase("plain") }
            try copy.read { txn throws in
                #expect(try txn.count(copied) == 100)
                #expect(try txn.value(in: copied, forKey: UInt64(42)) == Array("v42".utf8))
            }
        }
    }

    @Test("random puts and deletes agree with a dictionary model")
    func modelCheck() async throws {
        await propertyCheck(count: 30, input: Gen.uint64()) { seed in
            var random = SplitMix(seed: seed)
            try! withEnvironment { env throws in
                let db = try env.write { try $0.openDatabase("model", flags: .create) }
                var model: [UInt64: [UInt8]] = [:]
                for _ in 0..<20 {
                    try env.write { txn throws in
                        for _ in 0..<Int.random(in: 1...20, using: &random) {
                            let key = UInt64.random(in: 0..<50, using: &random)
                            if Bool.random(using: &random) {
                                let value = (0..<Int.random(in: 0...8, using: &random)).map { _ in
                                    UInt8.random(in: 0...255, using: &random)
                                }
                                try txn.put(db, key: key, value: value)
                                model[key] = value
                            } else {
                                #expect(try txn.delete(db, key: key) == (model.removeValue(forKey: key) != nil))
                            }
                        }
                    }
                }
                try env.read { txn throws in
                    var stored: [UInt64: [UInt8]] = [:]
                    try txn.withCursor(db) { cursor throws in
                        try cursor.forEach { entry in
                            stored[entry.key.loadBigEndianUInt64()] = Array(entry.value)
                            return true
                        }
                    }
                    #expect(stored == model)
                }
            }
        }
    }

    /// `put` and `delete` write through a cursor the transaction keeps per database, which starts its
    /// search from where the last write left it: whatever the order of writes and the page splits and merges
    /// between them, the result is what `mdb_put`/`mdb_del` give — checked against a model, with reads through
    /// the shared read cursor between the writes, and with keys and values enough to fill many pages.
    @Test("random duplicate puts, pair and key deletes, and reads between them agree with a model")
    func duplicateModelCheck() async throws {
        await propertyCheck(count: 20, input: Gen.uint64()) { seed in
            var random = SplitMix(seed: seed)
            try! withEnvironment { env throws in
                let db = try openDuplicates(env)
                var model: [UInt32: Set<UInt64>] = [:]
                for _ in 0..<12 {
                    try env.write { txn throws in
                        for _ in 0..<Int.random(in: 1...400, using: &random) {
                            let key = UInt32.random(in: 0..<300, using: &random)
                            let value = UInt64.random(in: 0..<64, using: &random)
                            switch Int.random(in: 0..<10, using: &random) {
                            case 0..<6:
                                let added = try txn.put(db, key: key, value: value, flags: .noDuplicateData)
                                #expect(added == model[key, default: []].insert(value).inserted)
                            case 6..<8:
                                let deleted = try txn.delete(db, key: key, value: value)
                                #expect(deleted == (model[key]?.remove(value) != nil))
                                if model[key]?.isEmpty == true { model[key] = nil }
                            case 8:
                                #expect(try txn.delete(db, key: key) == (model.removeValue(forKey: key) != nil))
                            default:
                                let cursor = try txn.cursor(db)
                                let found = try cursor.find(key) != nil
                                #expect(found == (model[key] != nil))
                                if found { #expect(try cursor.duplicateCount() == model[key]?.count) }
                                let entry = try cursor.seek(key, value: value)
                                let next = model[key]?.filter { $0 >= value }.min()
                                #expect(entry.map { $0.value.loadBigEndianUInt64() } == next)
                            }
                        }
                    }
                }
                #expect(try duplicateContents(env, db) == model)
                try env.read { txn throws in #expect(try txn.count(db) == model.values.reduce(0) { $0 + $1.count }) }
            }
        }
    }

    /// The parent's kept write cursor stays usable around nested transactions: a child's writes join the
    /// parent when it commits and vanish when it aborts, and the parent's next writes land where they belong.
    @Test("writes through the parent's kept cursor before, between and after committed and aborted children")
    func nestedAroundKeptCursor() async throws {
        await propertyCheck(count: 20, input: Gen.uint64()) { seed in
            var random = SplitMix(seed: seed)
            try! withEnvironment { env throws in
                let db = try openDuplicates(env)
                var model: [UInt32: Set<UInt64>] = [:]
                func change(_ txn: LMDBTransaction, _ model: inout [UInt32: Set<UInt64>]) throws {
                    for _ in 0..<Int.random(in: 1...200, using: &random) {
                        let key = UInt32.random(in: 0..<100, using: &random)
                        let value = UInt64.random(in: 0..<32, using: &random)
                        if Int.random(in: 0..<3, using: &random) < 2 {
                            try txn.put(db, key: key, value: value)
                            model[key, default: []].insert(value)
                        } else {
                            #expect(try txn.delete(db, key: key, value: value) == (model[key]?.remove(value) != nil))
                            if model[key]?.isEmpty == true { model[key] = nil }
                        }
                    }
                }
                try env.write { txn throws in
                    for _ in 0..<6 {
                        try change(txn, &model)
                        let commits = Bool.random(using: &random)
                        var childModel = model
                        _ = try? txn.nested { child throws in
                            try change(child, &childModel)
                            if !commits { throw Boom() }
                        }
                        if commits { model = childModel }
                    }
                    try change(txn, &model)
                }
                #expect(try duplicateContents(env, db) == model)
            }
        }
    }

    @Test("a value given to delete in a database without duplicates is ignored, as mdb_del does")
    func deleteIgnoresValueWithoutDuplicates() throws {
        try withEnvironment { env throws in
            let db = try env.write { try $0.openDatabase("plain", flags: .create) }
            try env.write { txn throws in
                try txn.put(db, key: UInt32(1), value: UInt32(7))
                #expect(try txn.delete(db, key: UInt32(1), value: UInt32(8)))
                #expect(try txn.delete(db, key: UInt32(1), value: UInt32(7)) == false)
            }
            try env.read { txn throws in #expect(try txn.count(db) == 0) }
        }
    }
}

private struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

@Suite("LMDBKit bulk duplicate reads", .offThePool)
struct LMDBKitChunkTests {
    @Test("value chunks of a fixed-size duplicate key hold every value once, in order")
    func chunks() throws {
        try withEnvironment { env throws in
            let db = try env.write { try $0.openDatabase("dups", flags: [.create, .duplicateSort, .duplicateFixed]) }
            try env.write { txn throws in
                for value in 0..<5_000 { try txn.put(db, key: UInt32(7), value: UInt64(value * 3)) }
                try txn.put(db, key: UInt32(8), value: UInt64(1))
            }
            var values: [UInt64] = []
            var chunks = 0
            try env.read { txn throws in
                try txn.withCursor(db) { cursor throws in
                    try cursor.forEachValueChunk(of: UInt32(7)) { chunk in
                        chunks += 1
                        #expect(chunk.count % 8 == 0)
                        for offset in stride(from: 0, to: chunk.count, by: 8) {
                            values.append(chunk.loadBigEndianUInt64(at: offset))
                        }
                        return true
                    }
                    var none = 0
                    try cursor.forEachValueChunk(of: UInt32(9)) { _ in
                        none += 1; return true
                    }
                    #expect(none == 0)
                    var single: [UInt64] = []
                    try cursor.forEachValueChunk(of: UInt32(8)) { chunk in
                        single.append(chunk.loadBigEndianUInt64())
                        #expect(chunk.count == 8)
                        return true
                    }
                    #expect(single == [1])
                }
            }
            #expect(values == (0..<5_000).map { UInt64($0 * 3) })
            #expect(chunks > 1 && chunks < 100)
        }
    }

    @Test("a run of values put in one call reads back like values put one by one; misuse is refused")
    func runs() throws {
        try withEnvironment { env throws in
            let (dups, plain) = try env.write { txn throws in
                (
                    try txn.openDatabase("dups", flags: [.create, .duplicateSort, .duplicateFixed]),
                    try txn.openDatabase("plain-dups", flags: [.create, .duplicateSort])
                )
            }
            func bigEndian(_ values: [UInt64]) -> [UInt8] {
                values.flatMap { withUnsafeBytes(of: $0.bigEndian, Array.init) }
            }
            // 20,000 values span several pages; a run under key 3 after one put value, a one-value run under 4.
            let long = (0..<20_000).map { UInt64($0) * 5 + 2 }
            try env.write { txn throws in
                try txn.put(dups, key: UInt32(3), value: UInt64(1))
                try bigEndian(long).withUnsafeBytes { bytes throws in
                    try txn.cursor(dups).putDuplicates(UInt32(3), values: bytes, valueSize: 8, flags: .appendDuplicate)
                }
                try bigEndian([9]).withUnsafeBytes { bytes throws in
                    try txn.cursor(dups).putDuplicates(UInt32(4), values: bytes, valueSize: 8)
                }
            }
            var read: [UInt32: [UInt64]] = [:]
            try env.read { txn throws in
                #expect(try txn.count(dups) == 20_002)
                try txn.withCursor(dups) { cursor throws in
                    try cursor.forEach { entry in
                        read[entry.key.loadBigEndianUInt32(), default: []].append(entry.value.loadBigEndianUInt64())
                        return true
                    }
                }
            }
            #expect(read == [3: [1] + long, 4: [9]])
            // Out of order under appendDuplicate: keyExists, and the aborted transaction leaves nothing.
            #expect(throws: LMDBError.self) {
                try env.write { txn throws in
                    try bigEndian([50, 40]).withUnsafeBytes { bytes throws in
                        try txn.cursor(dups).putDuplicates(
                            UInt32(5), values: bytes, valueSize: 8, flags: .appendDuplicate)
                    }
                }
            }
            do {
                try env.write { txn throws in
                    try bigEndian([1, 2]).withUnsafeBytes { bytes throws in
                        try txn.cursor(plain).putDuplicates(UInt32(1), values: bytes, valueSize: 8)
                    }
                }
                Issue.record("a run into a database without fixed-size values was accepted")
            } catch LMDBError.Code.incompatible {
            }
            try env.read { txn throws in
                #expect(try txn.contains(dups, key: UInt32(5)) == false)
                #expect(try txn.count(plain) == 0)
            }
        }
    }
}
