import KioskAPI
import Testing

/// Hex both ways: what a prepared index and the receipts' ids are written in.
@Suite struct HexTests {
    @Test func hexRoundTripsAndRefusesWhatIsNotHex() {
        let bytes: [UInt8] = [0, 1, 0x7f, 0x80, 0xab, 0xff]
        #expect(bytes.hexString == "00017f80abff")
        #expect([UInt8](hex: bytes.hexString) == bytes)
        #expect([UInt8](hex: "00017F80ABFF") == bytes, "either case")
        #expect([UInt8](hex: "") == [])
        for bad in ["0", "abc", "zz", "!!", "0g", "/0", " 00", "00\u{0}0", "é0"] {
            #expect([UInt8](hex: bad) == nil, "\(bad.debugDescription)")
        }
    }
}
