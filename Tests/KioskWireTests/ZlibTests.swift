import KioskWire
import NIOCore
import Testing

@Suite struct ZlibTests {
    @Test func roundTrip() throws {
        for input in [ByteBuffer(), ByteBuffer(string: "x"), ByteBuffer(string: String(repeating: "kiosk receipt ", count: 10_000))] {
            let compressed = Zlib.compress(input)
            #expect(compressed.getInteger(at: compressed.readerIndex, as: UInt8.self) == 0x78, "zlib header")
            #expect(try Zlib.decompress(compressed, limit: input.readableBytes) == input)
        }
    }

    @Test func incompressibleDataRoundTrips() throws {
        var generator = SplitMix64(seed: 1)
        let input = ByteBuffer(bytes: (0..<200_000).map { _ in UInt8(truncatingIfNeeded: generator.next()) })
        #expect(try Zlib.decompress(Zlib.compress(input), limit: 1 << 20) == input)
    }

    @Test func bombIsStoppedAtTheLimit() throws {
        let bomb = Zlib.compress(ByteBuffer(repeating: 0, count: 8 << 20))
        #expect(bomb.readableBytes < 20_000)
        let error = #expect(throws: WireError.self) { try Zlib.decompress(bomb, limit: 1 << 20) }
        #expect(error?.code == .decompressedTooLarge)
    }

    @Test func corruptAndTruncatedStreamsThrow() throws {
        let good = Zlib.compress(ByteBuffer(string: String(repeating: "abc", count: 1000)))
        let truncated = good.getSlice(at: good.readerIndex, length: good.readableBytes / 2)!
        #expect(throws: WireError.self) { try Zlib.decompress(truncated, limit: 1 << 20) }
        #expect(throws: WireError.self) { try Zlib.decompress(ByteBuffer(bytes: [1, 2, 3, 4, 5]), limit: 1 << 20) }
        #expect(throws: WireError.self) { try Zlib.decompress(ByteBuffer(), limit: 1 << 20) }
        var trailing = good
        trailing.writeBytes([9, 9])
        #expect(throws: WireError.self) { try Zlib.decompress(trailing, limit: 1 << 20) }
    }
}
