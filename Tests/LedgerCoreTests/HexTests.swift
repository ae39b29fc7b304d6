import LedgerCore
import Testing
import LedgerTestSupport

@Suite("Hex", .offThePool)
struct HexTests {
    @Test("encodes lowercase and decodes either case back; odd lengths and other characters are refused")
    func roundTrip() {
        let bytes: [UInt8] = [0x00, 0x01, 0x7f, 0x80, 0xab, 0xff]
        #expect(Hex.encode(bytes) == "00017f80abff")
        #expect(Hex.decode("00017f80abff") == bytes)
        #expect(Hex.decode("00017F80ABFF") == bytes)
        #expect(Hex.decode("") == [])
        for bad in ["0", "0g", "zz", "0 ", "é0", "+1"] { #expect(Hex.decode(bad) == nil, "\(bad)") }
        let all = (0...255).map { UInt8($0) }
        #expect(Hex.decode(Hex.encode(all)) == all)
    }
}
