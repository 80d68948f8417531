import KioskWire
import NIOCore
import Testing

@Suite struct ZlibTests {
    @Test func roundTrip() throws {
        for input in [
            ByteBuffer(), ByteBuffer(string: "x"),
            ByteBuffer(string: String(repeating: "kiosk receipt ", count: 10_000)),
        ] {
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

/// libdeflate's whole-buffer inflate, as download chunks use it: the exact
/// length or an error, never a partial success.
@Suite struct InflaterTests {
    let text = Array(String(repeating: "Kiosk sells digital goods. ", count: 4000).utf8)

    func compressed(_ bytes: [UInt8]) -> [UInt8] { Array(Zlib.compress(ByteBuffer(bytes: bytes)).readableBytesView) }

    func inflate(_ source: [UInt8], length: Int) throws(WireError) -> [UInt8] {
        let inflater = Zlib.Inflater()
        var out = [UInt8](repeating: 0, count: length)
        let result: Result<Void, WireError> = source.withUnsafeBytes { source in
            out.withUnsafeMutableBytes { destination in
                Result { () throws(WireError) in try inflater.inflate(source, into: destination) }
            }
        }
        try result.get()
        return out
    }

    @Test func inflatesExactlyAndAgreesWithZlib() throws {
        #expect(try inflate(compressed(text), length: text.count) == text)
        #expect(try inflate(compressed([]), length: 0) == [])
        #expect(Zlib.crc32(Array("123456789".utf8)) == 0xCBF4_3926, "the CRC-32 check value")
    }

    @Test func wrongLengthsTrailingBytesAndDamageAreRefused() throws {
        let stream = compressed(text)
        #expect(throws: WireError.self, "a destination shorter than the content") {
            try inflate(stream, length: text.count - 1)
        }
        #expect(throws: WireError.self, "a destination longer than the content") {
            try inflate(stream, length: text.count + 1)
        }
        #expect(throws: WireError.self, "bytes after the stream") { try inflate(stream + [0], length: text.count) }
        #expect(throws: WireError.self, "a truncated stream") {
            try inflate(Array(stream.dropLast(5)), length: text.count)
        }
        var damaged = stream
        damaged[damaged.count - 1] ^= 0xFF  // the Adler-32
        #expect(throws: WireError.self, "a wrong Adler-32") { try inflate(damaged, length: text.count) }
        #expect(throws: WireError.self, "not zlib at all") { try inflate([1, 2, 3, 4], length: 10) }
    }
}
