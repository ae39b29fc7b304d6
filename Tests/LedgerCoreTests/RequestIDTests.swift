import Foundation
import LedgerCore
import Testing
import LedgerTestSupport

@Suite(.offThePool) struct RequestIDTests {
    @Test func isALowercaseVersion4UUID() throws {
        for _ in 0..<2000 {
            let id = RequestID.random()
            let uuid = try #require(UUID(uuidString: id), "\(id) is not a UUID")
            #expect(uuid.uuidString.lowercased() == id)
            let bytes = withUnsafeBytes(of: uuid.uuid) { Array($0) }
            #expect(bytes[6] >> 4 == 4, "version nibble of \(id)")
            #expect(bytes[8] >> 6 == 0b10, "variant bits of \(id)")
        }
    }

    /// Every bit the generator gives lands in the id, in order: the id of known words is their hex with the
    /// version and variant bits overwritten.
    @Test func spellsTheGeneratorsBits() {
        struct Words: RandomNumberGenerator {
            var words: [UInt64]
            mutating func next() -> UInt64 { words.removeFirst() }
        }
        var all = Words(words: [.max, .max])
        #expect(RequestID.random(using: &all) == "ffffffff-ffff-4fff-bfff-ffffffffffff")
        var none = Words(words: [0, 0])
        #expect(RequestID.random(using: &none) == "00000000-0000-4000-8000-000000000000")
        var mixed = Words(words: [0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210])
        #expect(RequestID.random(using: &mixed) == "01234567-89ab-4def-bedc-ba9876543210")
    }

    @Test func doesNotRepeat() {
        let ids = (0..<20000).map { _ in RequestID.random() }
        #expect(Set(ids).count == ids.count)
    }
}

@Suite(.offThePool) struct PooledSystemRandomTests {
    /// Every word is handed out once: draws from several threads at once, across many refills of the pool,
    /// never repeat (64-bit words: a repeat by chance among 80,000 is about 2e-10 likely).
    @Test func concurrentDrawsNeverRepeat() async {
        let draws = await withTaskGroup(of: [UInt64].self) { group in
            for _ in 0..<4 {
                group.addTask {
                    var generator = PooledSystemRandomNumberGenerator()
                    return (0..<20_000).map { _ in generator.next() }
                }
            }
            return await group.reduce(into: []) { $0 += $1 }
        }
        #expect(draws.count == 80_000)
        #expect(Set(draws).count == draws.count)
    }

    /// `fill` writes every byte of buffers of any length, including lengths that are not whole words.
    @Test(arguments: [1, 7, 13, 4096, 4099])
    func fillWritesEveryByte(count: Int) {
        // Filled twice from zeroed buffers: a byte left unwritten would be zero both times; a written one is
        // zero twice with chance 1/65,536, so at most a few per buffer by chance.
        var first = [UInt8](repeating: 0, count: count)
        var second = [UInt8](repeating: 0, count: count)
        first.withUnsafeMutableBytes { PooledSystemRandomNumberGenerator.fill($0) }
        second.withUnsafeMutableBytes { PooledSystemRandomNumberGenerator.fill($0) }
        let zeroTwice = zip(first, second).filter { $0 == 0 && $1 == 0 }.count
        #expect(zeroTwice <= max(2, count / 1000), "\(zeroTwice) of \(count) bytes never written")
        #expect(first != second)
    }
}
