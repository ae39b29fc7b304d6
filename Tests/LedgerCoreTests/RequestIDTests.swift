import Foundation
import LedgerCore
import Testing

@Suite struct RequestIDTests {
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
