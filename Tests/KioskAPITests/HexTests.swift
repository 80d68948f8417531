import Foundation
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
        #expect((0...255).map { UInt8($0) }.hexString == (0...255).map { String(format: "%02x", $0) }.joined())
    }

    /// Random bytes for ids and secrets: exactly as many as asked, not the same twice.
    @Test func secureRandomGivesTheBytesAsked() {
        for count in [0, 1, 7, 8, 9, 12, 32] {
            #expect([UInt8].secureRandom(count: count).count == count)
        }
        #expect([UInt8].secureRandom(count: 12) != [UInt8].secureRandom(count: 12))
        // Every byte position takes other values than zero: no position is left unfilled.
        let draws = (0..<64).map { _ in [UInt8].secureRandom(count: 13) }
        for position in 0..<13 { #expect(draws.contains { $0[position] != 0 }, "byte \(position)") }
    }
}
